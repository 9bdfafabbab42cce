"""A browser watching the dashboard while a benchmark runs: headless Chromium (Debian's, found or
installed by devtools/chromium.py) opens the dashboard at ``--url`` and keeps the page of the
newest query open, as a person following a suite would, until ``--seconds`` have passed or it is
stopped. Used for the dashboard's cost (benchmarks/README.md):

    python benchmarks/watch_dashboard.py --url http://127.0.0.1:8765/ --seconds 900 &
    python benchmarks/tpch.py --sf 1 --iterations 3 --variant dashboard:dashboard_port=8765
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # devtools/, from a checkout

from devtools import chromium  # noqa: E402


def newest_query(url: str) -> str | None:
    """The id of the newest query the dashboard lists, None when it lists none or is not up."""
    try:
        with urllib.request.urlopen(url + "api/queries", timeout=5) as answer:
            queries = json.load(answer)["queries"]
    except OSError:
        return None
    return queries[0]["query_id"] if queries else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the dashboard (loopback: no token)")
    p.add_argument("--seconds", type=float, default=900.0, help="stop after this long")
    args = p.parse_args(argv)
    url = args.url if args.url.endswith("/") else args.url + "/"
    found = chromium.find_or_install()
    if isinstance(found, str):
        print(found, file=sys.stderr)
        return 1
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found.browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,800"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(found.driver))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill`: the browser is still closed
    deadline = time.monotonic() + args.seconds
    shown, pages = None, 0
    try:
        while time.monotonic() < deadline:
            query = newest_query(url)
            if query is not None and query != shown:  # follow each new query as it starts
                driver.get(f"{url}#/query/{query}")
                shown, pages = query, pages + 1
                if pages == 1:
                    print(f"watching {url}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        polls = driver.execute_script("return performance.getEntriesByType('resource').length")
        driver.quit()
        print(f"watched {pages} query pages; the last one made {polls} requests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
