"use strict";
// Nothing lives only here: every decision is POSTed and the page reloads its state from the server.
// The server writes the token into the page: GETs carry it in the URL (an <img> can send nothing else), a
// POST only in the X-MAG-Token header, which a page of another origin cannot send.
const TOKEN = document.querySelector('meta[name="mag-token"]').content;
const $ = (id) => document.getElementById(id);
const api = (path, params) => path + '?' + new URLSearchParams({...params, token: TOKEN});
const GUIDE_DECISIONS = ['accept', 'edit', 'reject'];
const DONE = {accept: 'Accepted', edit: 'Edited', reject: 'Rejected'};
let S = null, i = 0, mode = null, queue = Promise.resolve(), pending = 0;

// Drafts mark the target's label as **bold**: shown bold, built from text nodes (never parsed as HTML).
function rich(text, cls) {
  const span = el('span', cls);
  text.split(/\*\*(.+?)\*\*/).forEach((part, j) => span.append(j % 2 ? el('b', '', part) : part));
  return span;
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}
let toastTimer;
function toast(text, error) {
  const t = $('toast');
  t.textContent = text;
  t.className = 'show' + (error ? ' error' : '');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.className = ''; }, error ? 4000 : 1400);
}
async function errorOf(r) {
  const body = await r.json().catch(() => ({}));
  return body.error || `error ${r.status}`;
}
// Keys run one after another: a fast "a a a" accepts three steps, never one step three times.
function enqueue(fn) {
  pending++;
  document.body.dataset.busy = '1';
  queue = queue.then(fn).catch((e) => toast(`${e.message || e}: is the review server running?`, true)).finally(() => {
    if (--pending === 0) document.body.dataset.busy = '0';
  });
}

async function load(at) {
  const r = await fetch(api('/api/state'));
  if (!r.ok) { toast(await errorOf(r), true); return; }
  S = await r.json();
  const n = S.steps.length;
  i = at == null ? (S.first_unreviewed ?? 0) : at >= n ? (S.first_unreviewed ?? n - 1) : Math.max(0, at);
  render();
}

function render() {
  const p = S.progress, n = S.steps.length;
  $('who').textContent = 'annotator: ' + S.annotator;
  $('progress').textContent = `${p.reviewed} / ${p.total} reviewed` + (p.flagged ? ` · ${p.flagged} flagged` : '');
  $('bar').style.width = (p.total ? 100 * p.reviewed / p.total : 0) + '%';
  if (!n) { $('instruction').textContent = 'This dataset has no steps.'; return; }
  const s = S.steps[i];
  Object.assign(document.body.dataset, {index: i, episode: s.episode, step: s.step});
  $('shot').src = api('/api/image', {episode: s.episode, step: s.step});
  const t = s.target;
  $('target').textContent = t ? `target [${t.mark}] ${t.role || ''}` + (t.text ? ` “${t.text}”` : ', no text')
                              : 'no target element';
  const crumbs = [el('b', '', s.episode), el('span', '', `step ${s.step + 1} of ${s.steps}`),
                  el('span', '', `· #${i + 1} of ${n}`), el('span', 'pill', s.status || 'no status')];
  if (s.decision) crumbs.push(el('span', 'pill ' + s.decision, DONE[s.decision].toLowerCase()));
  if (s.flagged) crumbs.push(el('span', 'pill flag', 'target flagged'));
  if (S.first_unreviewed == null) crumbs.push(el('span', 'pill accept', 'all reviewed'));
  $('crumbs').replaceChildren(...crumbs);
  $('instruction').textContent = s.instruction;
  const hist = s.history.map((h) => {
    const li = el('li');
    const guide = h.guide ? rich(h.guide) : el('span', 'none', h.decision === 'reject' ? 'guide rejected' : 'no guide');
    li.append(el('code', '', h.action), ' ', guide);
    return li;
  });
  $('history').replaceChildren(...(hist.length ? hist : [el('li', 'none', 'none: this is the first step')]));
  $('history').style.listStyle = hist.length ? '' : 'none';
  $('action').textContent = s.action;
  $('guide').replaceChildren(s.draft ? rich(s.draft) : 'no draft: press e to write the guide');
  $('guide').className = 'guide' + (s.draft ? '' : ' empty');
  $('reason').replaceChildren();
  const v = $('verdict');
  v.className = s.decision || '';
  v.replaceChildren();
  if (s.decision) {
    v.append(el('b', '', DONE[s.decision]), ` by ${S.annotator} at ${s.time}`);
    if (s.decision === 'edit') { const d = el('div', '', '→ '); d.append(rich(s.final)); v.append(d); }
    if (s.reason) v.append(el('div', '', 'Reason: ' + s.reason));
  } else {
    v.append(el('span', 'hint', 'Not reviewed yet: does the draft tell a person exactly what the action does?'));
  }
  if (i + 1 < n) {  // fetch the next screenshot now, so j shows it at once
    const next = S.steps[i + 1];
    new Image().src = api('/api/image', {episode: next.episode, step: next.step});
  }
}

async function decide(decision, extra) {
  const s = S.steps[i];
  const headers = {'Content-Type': 'application/json', 'X-MAG-Token': TOKEN};
  const r = await fetch('/api/decision', {method: 'POST', headers,
    body: JSON.stringify({episode: s.episode, step: s.step, decision, ...extra})});
  if (!r.ok) { toast(await errorOf(r), true); return; }
  const {record, undone} = await r.json();
  let at = GUIDE_DECISIONS.includes(decision) ? i + 1 : i;
  if (decision === 'undo') at = S.steps.findIndex((x) => x.episode === record.episode && x.step === record.step);
  await load(at);
  const said = {accept: 'accepted', edit: 'edit saved', reject: 'rejected', flag_target: 'target flagged as wrong'};
  const what = undone ? undone.decision : 'decision';
  toast(decision === 'undo' ? `undone: ${what} on ${record.episode} step ${record.step + 1}` : said[decision]);
}

// e and r open a box in place of the page's keys: Enter saves, Escape cancels.
function openBox(kind) {
  const s = S.steps[i], edit = kind === 'edit';
  mode = kind;
  const box = el(edit ? 'textarea' : 'input');
  box.id = edit ? 'edit-box' : 'reason-box';
  if (edit) { box.rows = 3; box.value = s.final || s.draft || ''; }
  else box.placeholder = 'Why is this draft wrong?';
  const hint = el('div', 'hint', (edit ? 'Edit the guide. ' : '') + 'Enter saves · Esc cancels');
  (edit ? $('guide') : $('reason')).replaceChildren(box, hint);
  if (edit) $('guide').className = 'guide';
  box.focus();
  box.setSelectionRange(box.value.length, box.value.length);
  box.addEventListener('keydown', (ev) => {
    ev.stopPropagation();
    if (ev.key === 'Escape') { ev.preventDefault(); mode = null; render(); }
    else if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      const text = box.value.trim();
      if (!text) { toast(edit ? 'the guide is empty' : 'a reject needs a reason', true); return; }
      mode = null;
      enqueue(() => decide(kind, edit ? {final: text} : {reason: text}));
    }
  });
}

function flag() {
  if (S.steps[i].flagged) { toast('already flagged (u undoes it)'); return; }
  return decide('flag_target');
}
function go(at) { i = Math.max(0, Math.min(at, S.steps.length - 1)); render(); }

const KEYS = {
  a: ['accept', () => decide('accept')],
  e: ['edit', () => openBox('edit')],
  r: ['reject', () => openBox('reject')],
  t: ['target wrong', flag],
  u: ['undo', () => decide('undo')],
  j: ['next', () => go(i + 1)],
  k: ['previous', () => go(i - 1)],
};
function press(key) {
  if (!S || !S.steps.length || mode) return;
  if (key === 'e' || key === 'r') mode = 'opening';  // keys typed before the box is up must not act
  enqueue(KEYS[key][1]);
}
document.addEventListener('keydown', (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.target.closest('textarea, input')) return;
  const key = {ArrowRight: 'j', ArrowLeft: 'k'}[ev.key] || ev.key;
  if (!KEYS[key]) return;
  ev.preventDefault();  // also keeps the "e" itself out of the box it opens
  press(key);
});
$('keys').replaceChildren(...Object.entries(KEYS).map(([key, [label]]) => {
  const b = el('button');
  b.append(el('kbd', '', key), label);
  b.addEventListener('click', () => { b.blur(); press(key); });  // focus stays with the keys, not the button
  return b;
}));
enqueue(() => load());
