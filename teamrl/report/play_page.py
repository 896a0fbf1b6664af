"""The page of a person's seat (``teamrl play --web``), served at ``/play`` by the report's server: the turn
waiting for the person (the prompt the role's model would read) with a text box where the answer goes, and
the episodes finished so far. It polls ``/play/state`` and posts ``/play/answer``; everything from the
episode is shown as text (``textContent``), never as HTML."""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>teamrl play</title><link rel="icon" href="data:,">
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; }
pre { background: #f6f8fa; padding: .8rem; white-space: pre-wrap; border-radius: 4px; }
textarea { width: 100%; min-height: 8rem; font-family: ui-monospace, monospace; font-size: .95rem; }
button { margin-top: .5rem; padding: .4rem 1.2rem; }
.muted { color: #666; } .error { color: #b00020; }
table { border-collapse: collapse; }
td, th { padding: .2rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
</style></head><body>
<h1>Your seat: <span id="seat"></span></h1>
<p id="status" class="muted"></p>
<section id="turn" hidden>
  <h2>Your turn (<span id="kind"></span>)</h2>
  <p class="muted">What the role's model would read:</p>
  <pre id="prompt"></pre>
  <label for="answer">Your answer</label>
  <textarea id="answer" autofocus></textarea>
  <button id="send">Send</button> <span id="message"></span>
</section>
<h2>Finished episodes</h2>
<table><thead><tr><th>#</th><th>task</th><th>outcome</th><th>verifier</th></tr></thead>
<tbody id="finished"></tbody></table>
<p><a href="/">the run's report</a></p>
<script>
let shown = null;
const $ = (id) => document.getElementById(id);
async function poll() {
  let state;
  try { state = await (await fetch('/play/state', {cache: 'no-store'})).json(); }
  catch (e) { $('status').textContent = 'the play server has stopped'; return; }
  $('seat').textContent = state.seat;
  $('status').textContent = state.status;
  const turn = state.turn;
  $('turn').hidden = !turn;
  if (turn && turn.id !== shown) {
    shown = turn.id;
    $('kind').textContent = turn.kind;
    $('prompt').textContent = turn.prompt;
    $('answer').value = '';
    $('message').textContent = '';
    $('answer').focus();
  }
  const body = $('finished');
  body.replaceChildren(...state.finished.map((f) => {
    const row = document.createElement('tr');
    for (const v of [f.episode, f.task, f.outcome.toFixed(3), f.verifier]) {
      const cell = document.createElement('td'); cell.textContent = v; row.appendChild(cell);
    }
    return row;
  }));
  if (!state.over) setTimeout(poll, 1000);
}
$('send').addEventListener('click', async () => {
  const response = await fetch('/play/answer', {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({turn: shown, text: $('answer').value})});
  const reply = await response.json();
  $('message').textContent = reply.message;
  $('message').className = response.ok ? 'muted' : 'error';
});
poll();
</script></body></html>
"""
