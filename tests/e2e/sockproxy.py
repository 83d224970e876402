#!/usr/bin/env python3
"""sockproxy.py LISTEN TARGET - forward Unix-socket connections.

Listens on the Unix socket LISTEN and relays every connection, both ways,
to the Unix socket TARGET.  The fencing test puts one node's lockd
connection through it: killing the proxy (any signal) closes that node's
connection, and only that node's, as a network partition would, while the
other nodes talk to lockd directly.

It prints "ready" on stdout once it listens.
"""
import os
import selectors
import socket
import sys


def main():
    listen, target = sys.argv[1], sys.argv[2]
    try:
        os.unlink(listen)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(listen)
    srv.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                client, _ = srv.accept()
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    upstream.connect(target)
                except OSError:
                    client.close()
                    continue
                sel.register(client, selectors.EVENT_READ, upstream)
                sel.register(upstream, selectors.EVENT_READ, client)
                continue
            src, dst = key.fileobj, key.data
            if src.fileno() < 0:  # closed with its peer in this round
                continue
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    dst.sendall(data)
                    continue
                except OSError:
                    pass
            for s in (src, dst):
                sel.unregister(s)
                s.close()


if __name__ == "__main__":
    main()
