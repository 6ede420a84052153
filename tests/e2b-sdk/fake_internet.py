"""Stand-ins for the public hosts E2B's network tests reach, served inside the network namespace
of a private Docker daemon (scripts/test-e2b-network.sh), so those tests run on machines that
reach no internet and never send a packet off the host.

Each stand-in answers what the real host answers to the tests' requests, over https with a
certificate from a CA made for the run (the test template trusts it, and nothing else does):

- `https://1.1.1.1` answers 301 (Cloudflare's redirect to one.one.one.one);
- `https://8.8.8.8` answers 302 (Google's redirect to dns.google);
- `https://connectivitycheck.gstatic.com/generate_204` answers 204, its name resolved by a DNS
  server on `--dns` (the daemon's `dns`) that knows these names and no other.

The addresses are local to the namespace (on its loopback, where the script adds them), so a sandbox's
packets to them stop there: its egress policy is what decides whether they arrive. Run as root
inside the namespace; prints nothing, writes `--ready` once every socket listens."""

from __future__ import annotations

import argparse
import http.server
import ssl
import threading
from pathlib import Path

from dnslib import QTYPE, RCODE, RR, A  # type: ignore[import-untyped]
from dnslib.server import BaseResolver, DNSServer  # type: ignore[import-untyped]

GSTATIC = "203.0.113.204"
# address -> (path -> (status, Location))
SITES: dict[str, dict[str, tuple[int, str | None]]] = {
    "1.1.1.1": {"/": (301, "https://one.one.one.one/")},
    "8.8.8.8": {"/": (302, "https://dns.google/")},
    GSTATIC: {"/generate_204": (204, None)},
}
NAMES = {
    "connectivitycheck.gstatic.com.": GSTATIC,
    "one.one.one.one.": "1.1.1.1",
    "dns.google.": "8.8.8.8",
}


class Resolver(BaseResolver):  # type: ignore[misc]
    """A for the stand-ins' names; an empty answer for their other types; NXDOMAIN otherwise."""

    def resolve(self, request, handler):  # type: ignore[no-untyped-def]
        reply = request.reply()
        name = str(request.q.qname).lower()
        address = NAMES.get(name)
        if address is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype in (QTYPE.A, QTYPE.ANY):
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=60))
        return reply


def handler_for(address: str) -> type[http.server.BaseHTTPRequestHandler]:
    routes = SITES[address]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            """The status (and redirect) the route has; every answer's body is empty, so GET
            and HEAD answer alike."""
            status, location = routes.get(self.path.split("?", 1)[0], (404, None))
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.answer()

        def do_HEAD(self) -> None:  # noqa: N802
            self.answer()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cert", type=Path, required=True, help="the stand-ins' certificate (PEM)")
    parser.add_argument("--key", type=Path, required=True, help="its private key (PEM)")
    parser.add_argument("--dns", required=True, help="the address the DNS server listens on (port 53)")
    parser.add_argument("--ready", type=Path, required=True, help="a file written once all listen")
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    for address in SITES:
        server = http.server.ThreadingHTTPServer((address, 443), handler_for(address))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    for tcp in (False, True):
        DNSServer(Resolver(), address=args.dns, port=53, tcp=tcp).start_thread()
    args.ready.write_text("ready\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
