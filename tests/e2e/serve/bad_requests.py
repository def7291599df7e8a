#!/usr/bin/env python3
"""bad_requests.py - malformed, oversized and random HTTP requests against
memlyze serve over raw sockets; after each the server must still answer a
plain GET / with 200. Prints one "PASS: ..." or "FAIL: ..." line per check.

    bad_requests.py PORT
"""
import random
import socket
import sys

PORT = int(sys.argv[1])
failures = 0


def check(name, ok, detail=''):
    global failures
    print(('PASS: ' if ok else 'FAIL: ') + name + ('' if ok or not detail else ': ' + str(detail)[:300]))
    if not ok:
        failures += 1


def send(raw, timeout=5.0):
    """The status code of the answer to raw bytes (None: closed without one)."""
    s = socket.create_connection(('127.0.0.1', PORT), timeout=timeout)
    try:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        data = b''
        while len(data) < 1 << 20:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, OSError):
                break
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    line = data.split(b'\r\n', 1)[0].split(b' ')
    return int(line[1]) if len(line) > 1 and line[0].startswith(b'HTTP/') and line[1].isdigit() else None, data


def alive():
    code, _ = send(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
    return code == 200


cases = [
    ('garbage request line', b'\x00\x01\x02 garbage\r\n\r\n', (400, None)),
    ('no version', b'GET /\r\n\r\n', (400, 505, None, 200)),
    ('HTTP/9.9', b'GET / HTTP/9.9\r\nHost: x\r\n\r\n', (505, 400)),
    ('header without a colon', b'GET / HTTP/1.1\r\nHost x\r\nbroken\r\n\r\n', (400, 200)),
    ('URL of 200000 bytes', b'GET /' + b'A' * 200000 + b' HTTP/1.1\r\nHost: x\r\n\r\n', (414, 400, 431, None)),
    ('header of 200000 bytes', b'GET / HTTP/1.1\r\nHost: x\r\nX: ' + b'B' * 200000 + b'\r\n\r\n', (431, 400, 413, None)),
    ('unknown method', b'BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n', (405, 501, 400)),
    ('PUT', b'PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc', (405,)),
    ('POST with a body to a page', b'POST /top?f=0 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello', (405,)),
    ('bad percent-encoding', b'GET /top?f=%ZZ%00%ff HTTP/1.1\r\nHost: x\r\n\r\n', (400,)),
    ('NUL in the query', b'GET /top?f=0%00 HTTP/1.1\r\nHost: x\r\n\r\n', (400, 200)),
    ('huge source number', b'GET /top?f=99999999999999999999 HTTP/1.1\r\nHost: x\r\n\r\n', (400,)),
    ('negative source', b'GET /diff?a=-1&b=0 HTTP/1.1\r\nHost: x\r\n\r\n', (400,)),
    ('time of 10000 digits', b'GET /top?f=0&t=' + b'9' * 10000 + b' HTTP/1.1\r\nHost: x\r\n\r\n', (400, 414, 431, None)),
    ('path traversal', b'GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n', (404, 400)),
    ('truncated request', b'GET /top?f=0 HTTP/1.1\r\nHo', (400, None)),
    ('chunked garbage', b'POST /snapshot HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', (400, 404, None)),
    ('Content-Length lies', b'POST /snapshot HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nab', (400, 404, 413, None)),
]
for name, raw, want in cases:
    try:
        code, data = send(raw)
    except OSError as e:
        code, data = 'error: %s' % e, b''
    check('malformed: %s -> %s' % (name, code), code in want, data[:200])
    check('malformed: server still answers after: ' + name, alive())

# Random requests: a fixed seed, so a failure can be replayed.
rng = random.Random(19)
parts = [b'GET', b'POST', b'HEAD', b' ', b'/', b'/top', b'/diff', b'?f=', b'&t=', b'0', b'1', b'%', b'%41',
         b'HTTP/1.1', b'\r\n', b':', b'Host', b'\x00', b'\xff', b'Content-Length: ', b'9', b'#', b'\t']
codes = set()
died = 0
for i in range(300):
    raw = b''.join(rng.choice(parts) for _ in range(rng.randrange(1, 40)))
    if rng.random() < 0.3:
        raw += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    try:
        code, _ = send(raw, timeout=2.0)
        codes.add(code)
    except OSError:
        pass
    if i % 50 == 49 and not alive():
        died += 1
        break
check('fuzz: 300 random requests, the server keeps answering (codes %s)' % sorted(codes, key=str), died == 0 and alive())
sys.exit(1 if failures else 0)
