// record_cdp.js CHROMIUM OUTDIR — records the DevTools messages Chromium
// sends while the browser tools visit a small page, as seeds of the
// cdp_messages fuzz target: each message byte for byte as it arrived, one
// file per kind of event or reply, and one file holding a whole visit
// (without the network events; messages separated by NUL bytes, as the
// target splits its input).
// The page extractor and the search extractor are the ones in
// tools/readable.c. Needs Node 20+ (run with --experimental-websocket
// before Node 22).
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');

const [chromium, outdir] = process.argv.slice(2);
if (!chromium || !outdir) {
    console.error('usage: node record_cdp.js CHROMIUM OUTDIR');
    process.exit(2);
}

// The C string literal named name in tools/readable.c, decoded.
function extractor(name) {
    const src = fs.readFileSync(path.join(__dirname, '../../tools/readable.c'), 'utf8');
    const start = src.indexOf(`const char ${name}[] =`);
    const end = src.indexOf('\n    ;', start);
    let js = '';
    for (const m of src.slice(start, end).matchAll(/"((?:[^"\\]|\\.)*)"/g)) js += JSON.parse(`"${m[1]}"`);
    return js;
}

const PAGE = `<!doctype html><html><head><title>Seed page</title></head><body>
<h1>Heading</h1><p>A paragraph with <a href="/next">a link</a> and <b>bold</b> text.</p>
<ul><li>one</li><li>two <a href="https://example.org/x">out</a></li></ul>
<ol><li>first</li></ol><blockquote>quoted</blockquote>
<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>
<pre>code  line
  indented</pre><script>console.log("hi")</script></body></html>`;

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

async function main() {
    const server = http.createServer((req, res) => {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(PAGE);
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    const pageUrl = `http://127.0.0.1:${server.address().port}/page`;
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4cl-cdp-seed.'));
    const browser = spawn(chromium, ['--headless=new', '--no-sandbox', '--disable-gpu', '--remote-debugging-port=0',
        `--user-data-dir=${profile}`, '--no-first-run', 'about:blank'], { stdio: 'ignore' });
    try {
        let port = 0;
        for (let i = 0; i < 200 && !port; i++) {
            try { port = +fs.readFileSync(path.join(profile, 'DevToolsActivePort'), 'utf8').split('\n')[0]; } catch (e) { }
            if (!port) await sleep(100);
        }
        if (!port) throw new Error('the browser did not start');
        const target = await (await fetch(`http://127.0.0.1:${port}/json/new?about:blank`, { method: 'PUT' })).json();
        const ws = new WebSocket(target.webSocketDebuggerUrl);
        await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
        const msgs = [];
        const waiting = new Map();
        ws.onmessage = (ev) => {
            msgs.push(ev.data);
            const o = JSON.parse(ev.data);
            if (o.id && waiting.has(o.id)) { waiting.get(o.id)(o); waiting.delete(o.id); }
        };
        let next = 1;
        const call = (method, params) => new Promise((r) => {
            const id = next++;
            waiting.set(id, r);
            ws.send(JSON.stringify({ id, method, params: params || {} }));
        });
        await call('Page.enable');
        await call('Network.enable');
        await call('Page.setLifecycleEventsEnabled', { enabled: true });
        const tree = await call('Page.getFrameTree');
        await call('Page.navigate', { url: pageUrl });
        await sleep(1500);
        const world = await call('Page.createIsolatedWorld', { frameId: tree.result.frameTree.frame.id, worldName: 'ds4cl-reader' });
        const contextId = world.result.executionContextId;
        for (const js of [extractor('readable_page_js'), extractor('readable_search_js')])
            await call('Runtime.evaluate', { expression: js, contextId, returnByValue: true, timeout: 5000 });
        await call('Runtime.evaluate', { expression: 'throw new Error("boom")', contextId, returnByValue: true });
        await call('No.suchMethod');
        ws.close();

        fs.mkdirSync(outdir, { recursive: true });
        const seen = new Set();
        for (const m of msgs) {
            const o = JSON.parse(m);
            const key = o.method ? o.method + (o.params && o.params.name ? '-' + o.params.name : '')
                : 'reply-' + o.id;
            if (seen.has(key) || m.length > 8192) continue;
            seen.add(key);
            fs.writeFileSync(path.join(outdir, key.replace(/[^A-Za-z0-9.-]/g, '_')), m);
        }
        // The visit without the bulky network events, to keep it small.
        const visit = msgs.filter((m) => m.length <= 8192 && !/^\{"method":"Network\./.test(m));
        fs.writeFileSync(path.join(outdir, 'visit'), visit.join('\0'));
        console.log(`${msgs.length} messages, ${seen.size} seeds in ${outdir}`);
    } finally {
        browser.kill('SIGKILL');
        server.close();
        fs.rmSync(profile, { recursive: true, force: true });
    }
}

main().catch((e) => { console.error(e); process.exit(1); });
