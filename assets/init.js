(() => {
  if (window.__mag) return;
  const mag = window.__mag = {clicky: new WeakSet(), pending: new Set(), lastMutation: performance.now(), marks: []};
  // a suite's own "still building" checks (env.busy_js), each () => bool; one that throws counts as not busy
  mag.busy = [];
  const suiteBusy = () => mag.busy.some((check) => { try { return check(); } catch (e) { return false; } });
  const KINDS = new Set(['click', 'mousedown', 'mouseup', 'pointerdown', 'pointerup', 'dblclick', 'touchstart']);
  const addListener = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, fn, opts) {
    if (KINDS.has(type) && this instanceof Element) mag.clicky.add(this);
    return addListener.call(this, type, fn, opts);
  };
  const setT = window.setTimeout, clearT = window.clearTimeout;
  window.setTimeout = function (fn, ms, ...rest) {
    if (typeof fn !== 'function' || (ms || 0) > $SETTLE_TIMER_MS) return setT.call(window, fn, ms, ...rest);
    const id = setT.call(window, function () { mag.pending.delete(id); return fn.apply(this, rest); }, ms);
    mag.pending.add(id);
    return id;
  };
  window.clearTimeout = function (id) { mag.pending.delete(id); return clearT.call(window, id); };
  // MiniWoB's click tracker tags every clicked element (data-tampered, data-wob_*); those tags
  // change nothing on screen, so they must not hold the settle open after every click.
  const bookkeeping = (r) => r.type === 'attributes' && /^data-(tampered|wob_)/.test(r.attributeName);
  new MutationObserver((records) => { if (!records.every(bookkeeping)) mag.lastMutation = performance.now(); })
    .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  // The mark of an element: its own, else its nearest marked ancestor, else its first marked
  // descendant. Experts and the human recorder name DOM elements; the dataset names marks.
  mag.markOf = (el) => {
    for (let e = el; e; e = e.parentElement) { const i = mag.marks.indexOf(e); if (i >= 0) return i + 1; }
    const i = mag.marks.findIndex((m) => el && el.contains(m));
    return i >= 0 ? i + 1 : null;
  };
  // a wheel scroll lands a frame or more after the input event: count scrolls so the harness can wait for it
  mag.scrolls = 0;
  addEventListener('scroll', () => { mag.scrolls++; mag.lastMutation = performance.now(); }, true);
  // one frame later: the styles and layout of what just happened (a :hover, a new node) are computed
  // and the fetches they start are under way
  mag.frame = () => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))));
  // A form submit or a followed link starts its navigation a task or two later, when the DOM can
  // already look quiet and no request exists yet: the page says it is being left, and the settle
  // waits for the next document (listeners at the window's bubbling end run after the page's own,
  // so a submit or click the page cancelled does not count)
  mag.leaving = false;
  addEventListener('submit', (e) => { if (!e.defaultPrevented) mag.leaving = true; });
  addEventListener('click', (e) => {
    const a = !e.defaultPrevented && e.target instanceof Element && e.target.closest('a[href]');
    if (!a || (a.target && a.target !== '_self') || a.hasAttribute('download')) return;
    // a URL of this document with a fragment, even an empty one (href="#"), is an in-page jump, not a navigation
    if (a.href.split('#')[0] !== location.href.split('#')[0] || !a.href.includes('#')) mag.leaving = true;
  });
  addEventListener('beforeunload', () => { mag.leaving = true; });
  // The settle, waited for here in one call (collect.settle): until the DOM has been quiet for quietMs with no
  // short timer pending and the page not being left (for at most leavingMs), or capMs have passed. Its own
  // sleeps use the page's original setTimeout, so they are not pending timers themselves.
  // An image still loading (a lazy one only where it shows) moves layout and pixels when it lands; a loaded one
  // is decoded before the settle returns, so the screenshot shows it drawn (a sidebar avatar once was not).
  const shows = (img) => { const r = img.getBoundingClientRect();
    return r.bottom > 0 && r.right > 0 && r.top < innerHeight && r.left < innerWidth; };
  const loading = () => [...document.images].some((img) => !img.complete && (img.loading !== 'lazy' || shows(img)));
  const decoded = (ms) => Promise.race([new Promise((done) => setT.call(window, done, ms)), Promise.all(
    [...document.images].filter((img) => img.complete && img.naturalWidth).map((img) => img.decode().catch(() => 0)))]);
  mag.settle = async (quietMs, capMs, leavingMs, frame) => {
    const t0 = performance.now();
    if (frame) await mag.frame();
    for (;;) {
      const waited = performance.now() - t0, quiet = performance.now() - mag.lastMutation;
      // a document still loading has deferred scripts to run (Django admin's nav_sidebar.js opens the
      // sidebar): a busy CPU once showed the page before they ran, and the click landed on the old layout
      const busy = mag.pending.size > 0 || (mag.leaving && waited < leavingMs) || document.readyState !== 'complete'
        || suiteBusy() || loading();
      if (!busy && quiet >= quietMs) await decoded(Math.max(0, capMs - waited));
      if ((!busy && quiet >= quietMs) || waited >= capMs) return {quiet, busy};
      const need = busy ? 15 : quietMs - quiet;
      await new Promise((done) => setT.call(window, done, Math.max(5, Math.min(need, capMs - waited))));
    }
  };
})();
