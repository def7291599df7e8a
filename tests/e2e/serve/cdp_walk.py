#!/usr/bin/env python3
"""cdp_walk.py - drives headless Chromium through memlyze serve's pages
with the DevTools protocol over --remote-debugging-pipe (no libraries:
JSON messages separated by NUL bytes on fds 3 and 4), clicking with real
mouse events, and prints one "PASS: ..." or "FAIL: ..." line per check.

    cdp_walk.py CHROMIUM BASE_URL OUTDIR TRACE_IX A_IX B_IX ODD_IX

BASE_URL is the server's root; the sources are a trace of the demo server,
snapshots A and B of it (B later), and a fixture with hostile names.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time


class Chrome:
    def __init__(self, exe, profile):
        to_r, self.to_w = os.pipe()      # we write, Chromium reads on fd 3
        self.from_r, from_w = os.pipe()  # Chromium writes on fd 4

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)
        self.p = subprocess.Popen(
            [exe, '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
             '--disable-component-update', '--disable-sync', '--no-first-run', '--remote-debugging-pipe',
             '--user-data-dir=' + profile, '--window-size=1300,1000', 'about:blank'],
            pass_fds=(to_r, from_w, 3, 4), preexec_fn=fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf = b''
        self.next_id = 0
        self.events = []
        self.session = None
        t = self.call('Target.createTarget', {'url': 'about:blank'}, session=False)['targetId']
        self.session = self.call('Target.attachToTarget', {'targetId': t, 'flatten': True}, session=False)['sessionId']
        self.call('Page.enable')
        self.call('Runtime.enable')
        self.call('Emulation.setDeviceMetricsOverride',
                  {'width': 1300, 'height': 1000, 'deviceScaleFactor': 1, 'mobile': False})

    def _read_msg(self, deadline):
        while b'\0' not in self.buf:
            if time.time() > deadline:
                raise TimeoutError('no answer from Chromium')
            chunk = os.read(self.from_r, 1 << 16)
            if not chunk:
                raise EOFError('Chromium went away')
            self.buf += chunk
        msg, self.buf = self.buf.split(b'\0', 1)
        return json.loads(msg)

    def call(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        msg = {'id': self.next_id, 'method': method, 'params': params or {}}
        if session and self.session:
            msg['sessionId'] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b'\0')
        deadline = time.time() + timeout
        while True:
            m = self._read_msg(deadline)
            if m.get('id') == self.next_id:
                if 'error' in m:
                    raise RuntimeError('%s: %s' % (method, m['error']))
                return m.get('result', {})
            self.events.append(m)

    def wait_event(self, name, timeout=30):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get('method') == name:
                    del self.events[:i + 1]
                    return e
            self.events.append(self._read_msg(deadline))

    def eval(self, expr):
        r = self.call('Runtime.evaluate', {'expression': expr, 'returnByValue': True})
        if 'exceptionDetails' in r:
            raise RuntimeError('script error: %s' % r['exceptionDetails'])
        return r['result'].get('value')

    def goto(self, url):
        self.events.clear()
        self.call('Page.navigate', {'url': url})
        self.wait_event('Page.loadEventFired')

    def click_at(self, x, y, navigates=True):
        self.events.clear()
        for kind in ('mouseMoved', 'mousePressed', 'mouseReleased'):
            self.call('Input.dispatchMouseEvent', {'type': kind, 'x': x, 'y': y, 'button': 'left', 'clickCount': 1})
        if navigates:
            self.wait_event('Page.loadEventFired')

    def click(self, selector, navigates=True):
        r = self.eval("(function(){var e=document.querySelector(%s); if(!e) return null; e.scrollIntoView();"
                      "var r=e.getBoundingClientRect(); return [r.left+r.width/2, r.top+r.height/2];})()"
                      % json.dumps(selector))
        if not r:
            raise RuntimeError('nothing matches ' + selector)
        self.click_at(r[0], r[1], navigates)

    def screenshot(self, path):
        data = self.call('Page.captureScreenshot', {'format': 'png'})['data']
        with open(path, 'wb') as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call('Browser.close', session=False, timeout=5)
        except Exception:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


failures = 0


def check(name, ok, detail=''):
    global failures
    if ok:
        print('PASS: ' + name)
    else:
        failures += 1
        print('FAIL: %s%s' % (name, ': ' + str(detail)[:400] if detail else ''))


def main():
    exe, base, out = sys.argv[1], sys.argv[2].rstrip('/'), sys.argv[3]
    trace, a, b, odd = (int(x) for x in sys.argv[4:8])
    profile = tempfile.mkdtemp(dir=out)
    c = Chrome(exe, profile)
    try:
        # 1. The top table of snapshot B: the leak first.
        c.goto('%s/top?f=%d' % (base, b))
        first = c.eval("document.querySelector('#top a.sitelink').textContent")
        check('browser: top table lists the leak first', first and first.startswith('remember_request'), first)
        c.screenshot(os.path.join(out, 'top.png'))

        # 2. Click it: the flame graph, zoomed to that frame.
        c.click('#top a.sitelink')
        loc = c.eval('location.pathname + location.hash')
        check('browser: clicking the site opens the flame graph with #zoom', loc.startswith('/flame#zoom='), loc)
        z = c.eval("""(function(){
            var g = document.querySelectorAll('g.f'), leak = null, hidden = 0, other = null;
            for (var i = 0; i < g.length; i++) {
              var n = g[i].getAttribute('data-n');
              if (n === 'remember_request (server.c:27)') leak = g[i];
              if (n === 'refresh_cache (server.c:37)') other = g[i];
              if (g[i].style.display === 'none') hidden++;
            }
            return { leak: leak ? +leak.querySelector('rect').getAttribute('width') : -1,
                     other: other ? other.style.display : 'absent', hidden: hidden,
                     width: +document.getElementById('mlzfg').getAttribute('data-width') };
        })()""")
        check('browser: the leak frame is zoomed to full width', z['leak'] > z['width'] - 2 * 10 - 1, z)
        check('browser: frames outside the zoom are hidden', z['hidden'] > 0 and z['other'] in ('none', 'absent'), z)
        c.screenshot(os.path.join(out, 'flame.png'))
        # The link's #path alone (no #zoom): the frame found by walking its
        # labels from the root, the way a site whose function several
        # callers share is told apart.
        path = loc[loc.index('path='):]
        c.goto('%s/top?f=%d' % (base, b))     # not a same-page fragment change: a load
        c.goto('%s/flame?f=%d#%s' % (base, b, path))
        zp = c.eval("""(function(){
            var g = document.querySelectorAll('g.f');
            for (var i = 0; i < g.length; i++)
              if (g[i].getAttribute('data-n') === 'remember_request (server.c:27)')
                return +g[i].querySelector('rect').getAttribute('width');
            return -1; })()""")
        check('browser: #path alone zooms to that frame', zp > z['width'] - 2 * 10 - 1, zp)
        c.goto('%s/top?f=%d' % (base, b))
        c.click('#top a.sitelink')

        # 3. The navigation's diff with the previous profile (A -> B).
        c.click('#nav-diff')
        loc = c.eval('location.pathname + location.search')
        check('browser: nav opens the diff A -> B', loc == '/diff?a=%d&b=%d' % (a, b), loc)
        row = c.eval("""(function(){ var r = document.querySelector('#diff tr:nth-child(2)');
            return [r.querySelector('a.sitelink').textContent, r.children[1].className, r.children[1].textContent]; })()""")
        check('browser: the diff ranks the leak first and marks it grown', row[0].startswith('remember_request')
              and 'grew' in row[1] and row[2].startswith('+'), row)
        c.screenshot(os.path.join(out, 'diff.png'))

        # 4. From the diff: the growth flame graph, the leak red.
        c.click('#diff a.sitelink')
        fill = c.eval("""(function(){ var g = document.querySelectorAll('g.f');
            for (var i = 0; i < g.length; i++) if (g[i].getAttribute('data-n') === 'remember_request (server.c:27)')
              return g[i].querySelector('rect').getAttribute('fill');
            return null; })()""")
        check('browser: diff flame graph colors the leak red', fill and fill.startswith('rgb(255,'), fill)
        check('browser: diff flame graph names its base', c.eval("!!document.getElementById('flamebase')"))

        # 5. The trace's timeline: two clicks pick a diff.
        c.goto('%s/timeline?f=%d' % (base, trace))
        box = c.eval("""(function(){ var s = document.querySelector('#chart svg'), r = s.getBoundingClientRect();
            var g = document.getElementById('mlztl');
            return [r.left, r.top, r.width, r.height, s.viewBox.baseVal.width,
                    +g.getAttribute('data-left'), +g.getAttribute('data-plot-width')]; })()""")
        scale = box[2] / box[4]
        y = box[1] + box[3] / 2

        def px(frac):
            return box[0] + (box[5] + frac * box[6]) * scale
        c.screenshot(os.path.join(out, 'timeline.png'))
        c.click_at(px(0.15), y, navigates=False)
        pick = c.eval("document.getElementById('pick').textContent")
        check('browser: first timeline click picks A', pick.startswith('A at +'), pick)
        c.click_at(px(0.95), y)
        q = c.eval('location.pathname + location.search')
        check('browser: second click opens the diff of the two moments',
              q.startswith('/diff?a=%d&ta=' % trace) and '&tb=' in q, q)
        head = c.eval("document.querySelector('h1').textContent")
        check('browser: the moments diff names both times', head.count(' at +') == 2, head)
        first = c.eval("(document.querySelector('#diff a.sitelink') || {}).textContent")
        check('browser: the leak grew most between the moments', bool(first) and first.startswith('remember_request'), first)

        # 6. Hostile names: shown as text, never run.
        c.goto('%s/top?f=%d' % (base, odd))
        check('browser: a <script> in a symbol name does not run', c.eval('window.pwned === undefined'))
        txt = c.eval("document.getElementById('top').textContent")
        check('browser: the <script> name is shown as text', '<script>window.pwned=1</script>' in txt)
        c.goto('%s/flame?f=%d' % (base, odd))
        check('browser: ... nor in the flame graph', c.eval('window.pwned === undefined'))
        c.goto('%s/tree?f=%d' % (base, odd))
        check('browser: ... nor in the tree', c.eval('window.pwned === undefined'))
    finally:
        c.close()
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
