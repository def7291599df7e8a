#!/usr/bin/env python3
"""svg_check.py - reads memlyze's SVG and HTML reports with a real XML parser.

    svg_check.py flame FILE.svg|FILE.html    one line per frame: "fill<TAB>width<TAB>label"
    svg_check.py timeline FILE.svg           points=N, markers=..., axis texts
    svg_check.py selfcontained FILE          fails on any external reference

An HTML flame graph is checked by parsing its inline <svg> element as XML.
Exit status 1 (with a reason) when the file is not well-formed.
"""
import re
import sys
import xml.etree.ElementTree as ET

NS = '{http://www.w3.org/2000/svg}'


def load_svg(path):
    text = open(path, encoding='utf-8').read()
    if path.endswith('.html'):
        if not text.startswith('<!DOCTYPE html>'):
            raise SystemExit('no doctype')
        m = re.search(r'<svg .*?</svg>', text, re.S)
        if not m:
            raise SystemExit('no inline svg')
        text = m.group(0)
    try:
        return ET.fromstring(text.encode('utf-8'))
    except ET.ParseError as e:
        raise SystemExit('not well-formed: %s' % e)


def flame(path):
    root = load_svg(path)
    n = 0
    for g in root.iter(NS + 'g'):
        if g.get('class') != 'f':
            continue
        rect = g.find(NS + 'rect')
        title = g.find(NS + 'title')
        print('%s\t%s\t%s\t%s' % (rect.get('fill'), rect.get('width'), g.get('data-n'),
                                  (title.text or '').replace('\n', ' | ')))
        n += 1
    if n == 0:
        raise SystemExit('no frames')


def timeline(path):
    root = load_svg(path)
    line = [p for p in root.iter(NS + 'path') if p.get('class') == 'line']
    if len(line) != 1:
        raise SystemExit('want one line path')
    points = len(re.findall(r'[MLHV]', line[0].get('d')))
    markers = []
    for g in root.iter(NS + 'g'):
        if g.get('class') == 'marker':
            t = g.find(NS + 'text')
            markers.append(t.text if t is not None else '(unlabelled)')
    texts = [t.text or '' for t in root.iter(NS + 'text')]
    print('points=%d' % points)
    print('markers=%s' % ','.join(markers))
    for t in texts:
        print('text=%s' % t)


def selfcontained(path):
    text = open(path, encoding='utf-8').read()
    bad = re.findall(r'(?:href|src)\s*=\s*["\'](?!#)[^"\']*|@import|url\((?!#)|https?://(?!www\.w3\.org/2000/svg)', text)
    if bad:
        raise SystemExit('external references: %s' % bad[:5])
    print('self-contained')


if __name__ == '__main__':
    {'flame': flame, 'timeline': timeline, 'selfcontained': selfcontained}[sys.argv[1]](sys.argv[2])
