async ([scale, tries]) => {
  // `scale`: screenshot pixels per CSS px. Passed in, not read from devicePixelRatio, which a
  // headed browser resets when its window takes focus.
  // `tries`: the marks are read again a frame later until two readings agree (at most `tries`
  // times): an icon drawn with a CSS image collapses while its :hover image loads, and layout
  // moves when late images arrive -- changes that no DOM mutation announces.
  if (!window.__mag) window.__mag = {clicky: new WeakSet(), pending: new Set(), lastMutation: 0, marks: []};
  const mag = window.__mag, W = window.innerWidth, H = window.innerHeight, dpr = scale || window.devicePixelRatio || 1;
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'combobox', 'textbox', 'searchbox', 'switch', 'slider', 'spinbutton', 'treeitem',
    'gridcell']);
  const IMPLICIT = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', SUMMARY: 'button'};
  const INPUT_ROLE = {checkbox: 'checkbox', radio: 'radio', button: 'button', submit: 'button', reset: 'button',
    image: 'button', range: 'slider', number: 'spinbutton', search: 'searchbox'};
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim().slice(0, 100);
  function interactive(el) {
    const tag = el.tagName;
    if (tag === 'HTML' || tag === 'BODY') return false;
    if (tag === 'INPUT') return el.type !== 'hidden';
    if (tag === 'BUTTON' || tag === 'SELECT' || tag === 'TEXTAREA' || tag === 'SUMMARY') return true;
    if (tag === 'A' && el.hasAttribute('href')) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    if (ROLES.has(el.getAttribute('role'))) return true;
    if (mag.clicky.has(el) || el.onclick || el.hasAttribute('onclick')) return true;
    // a pointer cursor marks a widget where it starts, not on every child that inherits it
    return getComputedStyle(el).cursor === 'pointer' &&
      !(el.parentElement && getComputedStyle(el.parentElement).cursor === 'pointer');
  }
  function visibleBox(el) {
    const r = el.getBoundingClientRect();
    let x0 = Math.max(0, r.left), y0 = Math.max(0, r.top), x1 = Math.min(W, r.right), y1 = Math.min(H, r.bottom);
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
      const c = p.getBoundingClientRect();
      x0 = Math.max(x0, c.left); y0 = Math.max(y0, c.top); x1 = Math.min(x1, c.right); y1 = Math.min(y1, c.bottom);
    }
    if (x1 - x0 < $MIN_SIDE_PX || y1 - y0 < $MIN_SIDE_PX || (x1 - x0) * (y1 - y0) < $MIN_AREA_PX) return null;
    if (el.checkVisibility && !el.checkVisibility({opacityProperty: true, visibilityProperty: true})) return null;
    const seen = (x, y) => { const hit = document.elementFromPoint(x, y);
      return hit && (hit === el || el.contains(hit) || (hit.tagName === 'LABEL' && hit.control === el)); };
    if (seen((x0 + x1) / 2, (y0 + y1) / 2)) return [x0, y0, x1, y1];
    // an inline element that wraps (a long link) has one box per line and its bounding box's centre
    // can fall on other text: its box becomes the first line box that shows it, so the click point
    // (a box's centre) is on the element itself
    const rects = el.getClientRects();
    for (let i = 0; rects.length > 1 && i < rects.length; i++) {
      const r = rects[i];
      const b = [Math.max(x0, r.left), Math.max(y0, r.top), Math.min(x1, r.right), Math.min(y1, r.bottom)];
      const big = b[2] - b[0] >= $MIN_SIDE_PX && b[3] - b[1] >= $MIN_SIDE_PX;
      if (big && seen((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)) return b;
    }
    return null;
  }
  function name(el) {
    const aria = el.getAttribute('aria-label');
    if (aria) return clean(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\s+/).map((id) => document.getElementById(id)).filter(Boolean)
        .map((e) => e.innerText).join(' ');
      if (clean(t)) return clean(t);
    }
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') {
      if (['submit', 'button', 'reset'].includes(el.type)) return clean(el.value);
      if (el.labels && el.labels.length) return clean(el.labels[0].innerText);
      const prev = el.previousElementSibling;
      if (prev && prev.tagName === 'LABEL') return clean(prev.innerText);
      if (tag === 'SELECT') return clean(el.selectedOptions.length ? el.selectedOptions[0].text : '');
      return clean(el.placeholder || el.title || (el.type === 'text' ? '' : el.value));
    }
    return clean(el.innerText || el.getAttribute('title') || el.getAttribute('alt') || el.value);
  }
  function role(el) {
    const r = el.getAttribute('role');
    if (r) return r;
    if (el.tagName === 'INPUT') return INPUT_ROLE[el.type] || 'textbox';
    return IMPLICIT[el.tagName] || (el.isContentEditable ? 'textbox' : 'generic');
  }
  function read() {
  let items = [];
  for (const el of document.querySelectorAll('body *')) {
    if (!interactive(el)) continue;
    const box = visibleBox(el);
    if (box) items.push({el, box});
  }
  // a container goes when its marked descendants cover most of it (the innermost target wins)
  const area = (b) => (b[2] - b[0]) * (b[3] - b[1]);
  const overlap = (a, b) => Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0])) *
                            Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1]));
  items = items.filter((it) => {
    let covered = 0;
    for (const o of items) if (o !== it && it.el.contains(o.el)) covered += overlap(it.box, o.box);
    return covered < $CONTAINER_COVER * area(it.box);
  });
  // reading order: rows top to bottom (a row = boxes whose tops are within half a box height), then left to right
  items.sort((a, b) => a.box[1] - b.box[1] || a.box[0] - b.box[0]);
  const rows = [];
  for (const it of items) {
    const row = rows[rows.length - 1], h = it.box[3] - it.box[1];
    if (row && it.box[1] < row.top + Math.min(row.h, h) / 2) { row.items.push(it); row.h = Math.min(row.h, h); }
    else rows.push({top: it.box[1], h, items: [it]});
  }
  items = rows.flatMap((r) => r.items.sort((a, b) => a.box[0] - b.box[0]));
  const elements = items.map((it, i) => ({
    mark: i + 1, tag: it.el.tagName.toLowerCase(), role: role(it.el), text: name(it.el),
    bbox: it.box.map((v) => Math.round(v * dpr)),
  }));
  const vv = window.visualViewport;
  return {elements, marks: items.map((it) => it.el), url: location.href, dpr, viewport: [W, H],
          scroll: vv ? [vv.pageLeft, vv.pageTop] : [scrollX, scrollY]};
  }
  const key = (o) => JSON.stringify([o.elements, o.scroll]);
  let obs = read();
  for (let i = 0; i < (tries || 0); i++) {
    await new Promise((done) => requestAnimationFrame(done));
    const again = read();
    const same = key(again) === key(obs);
    obs = again;
    if (same) break;
  }
  mag.marks = obs.marks;
  delete obs.marks;
  return obs;
}
