"""An Arrow Flight SQL endpoint over a cluster (`datafusion-distributed serve`; see
docs/flight-sql.md): `server` answers the calls, `sessions` keeps one context per client
connection and bounds the queries running, `metadata` answers the catalog calls, `messages`
holds the protocol's protobuf messages."""

from .server import FlightSqlServer, ServeOptions

__all__ = ["FlightSqlServer", "ServeOptions"]
