"""Read a paginated HTTP API as a table while the query runs, and join it with a Parquet table.

    .venv/bin/python examples/feed_http_api.py

1. Starts a small JSON API on 127.0.0.1 (http.server, in a thread): `GET /pages?cursor=N`
   lists a few page ids and the cursor of the next listing (like an object store listing keys
   page by page); `GET /page/<id>` returns one page of order events.
2. Writes a Parquet table `customers` to a temporary folder.
3. Registers the API as the table `orders` of a DistributedContext: the provider walks the
   listing on the coordinator, one listing call at a time as the tasks ask for pages (nothing
   is listed when the query is planned); the reader fetches one page on a worker and returns
   its rows as Arrow.
4. Runs a join and an aggregation over both tables, prints the plan, the pages each task read
   and the result, and checks it against single-node DataFusion over the same pages.
"""

from __future__ import annotations

import json
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, read_units
from datafusion_distributed.test_utils.compare import assert_tables_equal

PAGES, PAGES_PER_LISTING, ROWS_PER_PAGE, CUSTOMERS = 24, 5, 200, 50
COUNTRIES = ["DE", "FR", "JP", "US"]
ORDERS = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.float64())])

QUERY = """
SELECT c.country, count(*) AS orders, round(sum(o.amount), 2) AS revenue
FROM orders o JOIN customers c ON o.customer_id = c.customer_id
GROUP BY c.country
ORDER BY c.country
"""


def page_rows(page: int) -> list[dict]:
    """The order events of one page: the same on every run."""
    first = page * ROWS_PER_PAGE
    return [
        {"order_id": i, "customer_id": (i * 7) % CUSTOMERS, "amount": round((i % 97) * 1.25, 2)}
        for i in range(first, first + ROWS_PER_PAGE)
    ]


class OrdersApi(BaseHTTPRequestHandler):
    """`/pages?cursor=N` lists page ids from N on; `/page/<id>` serves one page."""

    listings = 0  # listing calls answered, to show that pages are discovered as the query runs

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/pages":
            cursor = int(parse_qs(url.query).get("cursor", ["0"])[0])
            ids = list(range(cursor, min(cursor + PAGES_PER_LISTING, PAGES)))
            following = cursor + PAGES_PER_LISTING
            body = {"pages": ids, "next": following if following < PAGES else None}
            type(self).listings += 1
        elif url.path.startswith("/page/"):
            body = {"rows": page_rows(int(url.path.rsplit("/", 1)[1]))}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet: the example prints its own lines
        pass


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def list_pages(base: str) -> Iterator[str]:
    """The provider: page URLs, one listing call at a time, as they are asked for."""
    cursor = 0
    while cursor is not None:
        listing = get_json(f"{base}/pages?cursor={cursor}")
        for page in listing["pages"]:
            yield f"{base}/page/{page}"
        cursor = listing["next"]


def read_page(url: str) -> pa.Table:
    """The reader, run on a worker: one page's rows as Arrow."""
    return pa.Table.from_pylist(get_json(url)["rows"], schema=ORDERS)


def write_customers(folder: str) -> None:
    ids = list(range(CUSTOMERS))
    table = pa.table({"customer_id": ids, "country": [COUNTRIES[i % len(COUNTRIES)] for i in ids]})
    pq.write_table(table, f"{folder}/customers.parquet")


def main() -> pa.Table:
    """Run the example; returns the distributed result (checked against single node)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), OrdersApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with tempfile.TemporaryDirectory() as folder:
            write_customers(folder)
            ctx = SessionContext()
            ctx.register_parquet("customers", folder)
            with DistributedContext(ctx) as dctx:  # two in-process workers
                feed = dctx.register_feed("orders", lambda: list_pages(base), read_page, ORDERS)
                df = dctx.sql(QUERY)
                print("Distributed plan:")
                df.explain()
                print(f"listing calls before the query ran: {OrdersApi.listings}")
                result = df.to_arrow_table()
                print(f"listing calls while it ran: {OrdersApi.listings}")
                for stage, tasks in sorted(df.metrics.feed_units.items()):
                    print(f"stage {stage}: {sum(tasks.values())} pages read by {len(tasks)} tasks")
                print(result.to_pandas().to_string(index=False))

                single = SessionContext()
                single.register_parquet("customers", folder)
                single.register_view("orders", single.from_arrow(read_units(feed)))
                assert_tables_equal(result, single.sql(QUERY).to_arrow_table(), sql=QUERY)
                print("same answer as single-node DataFusion over the same pages")
                return result
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
