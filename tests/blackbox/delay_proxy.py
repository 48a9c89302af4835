#!/usr/bin/env python3
"""Holds back by a fixed delay every byte one node of a network lab sends.

Runs inside the node's network namespace (tests/blackbox/network_lab.h),
where nftables redirects to it both the TCP connections the node opens and
those opened to the node. It learns each connection's real destination
(SO_ORIGINAL_DST), connects there with its own packets marked so that they
are not redirected again, and forwards both ways; what the node sends (to
its peers, to etcd, to clients) is written `--delay_ms` after it was read,
or the delay `--delay_ms_to` gives the other end's address (regions: a
node far from one peer and near another).
This stands in for netem (`tc qdisc ... netem delay`) on kernels built
without it. Bytes are delayed, not packets: a lost packet is not modelled.
"""

import argparse
import asyncio
import socket
import struct
import sys

SO_ORIGINAL_DST = 80


def original_destination(sock):
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


async def pump(reader, writer, delay):
    """Copies reader to writer, each chunk `delay` seconds after it came."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((loop.time() + delay, data if data else None))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass


def delays_by_host(text):
    """"10.77.0.11=15,10.77.0.12=30" -> {"10.77.0.11": 0.015, ...}."""
    delays = {}
    for item in filter(None, text.split(",")):
        host, _, ms = item.partition("=")
        delays[host] = int(ms) / 1000
    return delays


async def serve_connection(reader, writer, args):
    try:
        host, port = original_destination(writer.get_extra_info("socket"))
    except OSError:
        # Not redirected: someone asking whether the proxy listens yet.
        writer.close()
        return
    upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, args.mark)
    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(upstream, (host, port))
    except OSError:
        upstream.close()
        writer.close()
        return
    up_reader, up_writer = await asyncio.open_connection(sock=upstream)
    # A connection to the node's own address came in from outside: what
    # the node sends is the answer. Any other was opened by the node.
    incoming = host == args.node_host
    other_end = writer.get_extra_info("peername")[0] if incoming else host
    delay = args.delays.get(other_end, args.delay_ms / 1000)
    to_node = pump(reader, up_writer, 0 if incoming else delay)
    from_node = pump(up_reader, writer, delay if incoming else 0)
    await asyncio.gather(to_node, from_node, return_exceptions=True)
    writer.close()
    up_writer.close()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen_port", type=int, required=True,
                        help="port nftables redirects the node's connections to")
    parser.add_argument("--node_host", required=True, help="the node's own address")
    parser.add_argument("--delay_ms", type=int, required=True,
                        help="how long each byte the node sends is held back")
    parser.add_argument("--delay_ms_to", default="",
                        help="HOST=MS,...: what the node sends to HOST is held back MS "
                             "instead")
    parser.add_argument("--mark", type=lambda v: int(v, 0), required=True,
                        help="firewall mark of the proxy's own connections")
    args = parser.parse_args()
    args.delays = delays_by_host(args.delay_ms_to)
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, args), "0.0.0.0", args.listen_port,
        reuse_address=True)
    print(f"delay_proxy: {args.delay_ms} ms on what {args.node_host} sends"
          + (f", {args.delay_ms_to} by destination" if args.delays else ""), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
