"""An epoll echo server holding any number of connections (scale tests and the benchmark).

python echo_server.py HOST PORT    prints "ready" once listening
"""

import selectors
import socket
import sys


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    listener = socket.create_server((host, port), backlog=65535)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            if sock is listener:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionError:
                data = b""
            if data:
                sock.sendall(data)  # small echoes only: they fit in the send buffer
            else:
                sel.unregister(sock)
                sock.close()


if __name__ == "__main__":
    main()
