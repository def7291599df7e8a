#!/usr/bin/env python3
"""png_stats.py - what a screenshot shows, without image libraries: decodes
an 8-bit RGB/RGBA PNG (zlib + the five scanline filters) and prints
"colors=N nonwhite=F magenta=M reddish=R bluish=B" (distinct colors, the
share of pixels that are not near-white, and counts of pixels close to the
search highlight rgb(230,0,230), to strong reds and to strong blues).

    png_stats.py shot.png
"""
import struct
import sys
import zlib


def decode(path):
    data = open(path, 'rb').read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise SystemExit('not a PNG')
    pos, idat, w = 8, [], 0
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            w, h, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise SystemExit('unsupported PNG (depth %d, color type %d)' % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b'IDAT':
            idat.append(body)
        pos += 12 + n
    raw = zlib.decompress(b''.join(idat))
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = decode(sys.argv[1])
    colors = set()
    nonwhite = magenta = red = blue = 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            colors.add((r, g, b))
            if r < 235 or g < 235 or b < 235:
                nonwhite += 1
            if abs(r - 230) < 20 and g < 30 and abs(b - 230) < 20:
                magenta += 1
            if r > 200 and g < 120 and b < 120:
                red += 1
            if b > 200 and r < 150 and g < 150:
                blue += 1
    print('colors=%d nonwhite=%.3f magenta=%d reddish=%d bluish=%d size=%dx%d'
          % (len(colors), nonwhite / float(w * h), magenta, red, blue, w, h))


if __name__ == '__main__':
    main()
