"""envs/example.py -- a site of your own in ~50 lines: the template of "Add your own site" in docs/environments.md.

One page served from memory on 127.0.0.1: a seeded word to type into a box, and a Send button. The
page reports its own end (window.result), as MiniWoB's pages do; a suite judged on the final state
instead (a database, a URL, an answer) implements evaluate(), as envs/backoffice/suite.py does.
  python collect.py --suite example --episodes 3 --out /tmp/example
"""
import http.server
import random
import threading

from envs import Environment, Move

PAGE = b"""<!doctype html><html><body style="margin:0;font:16px Arial">
<p id="task">&nbsp;</p><input id="word"> <button id="send">Send</button>
<script>window.result = null; document.getElementById('send').onclick = () => {
  window.result = document.getElementById('word').value === window.expected; };</script></body></html>"""
WORDS = ("apple", "river", "stone", "cloud")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):   # quiet: a run would print a line per request
        pass


class Example(Environment):
    suite = "example"
    viewport, scale = (320, 120), 2   # CSS px and device scale: a 640x240 screenshot

    def __init__(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)   # a free port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.origins = [f"http://127.0.0.1:{self.server.server_address[1]}"]     # navigation stays here

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def all_tasks(self):
        return ["type-word"]

    def url(self, task):
        return self.origins[0] + "/"

    def public_url(self, url):   # datasets must not depend on the port a run happened to get
        return url.replace(self.origins[0], "__EXAMPLE__")

    async def reset(self, page, task, seed):
        word = random.Random(seed).choice(WORDS)
        await page.goto(self.url(task), wait_until="load")
        await page.evaluate("(w) => { window.expected = w; document.getElementById('task').textContent ="
                            " `Type ${w} and press Send.`; }", word)
        return f'Type "{word}" and press Send.', {"word": word}

    async def status(self, page):
        result = await page.evaluate("window.result")
        return result is not None, float(bool(result)), bool(result)

    def expert(self, task):
        return type_word


async def type_word(page, instruction):
    yield Move("type", css="#word", value=instruction.split('"')[1], why="to enter the requested word")
    yield Move("click", css="#send", why="to send the word")
