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
    // clipped by each scrolling ancestor on its chain of containing blocks: a fixed box (a fly-out menu)
    // is not clipped by the scrolling <nav> it sits in, nor an absolute one by a static ancestor
    let pos = getComputedStyle(el).position;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      const holds = s.transform !== 'none' || s.filter !== 'none' || s.perspective !== 'none' ||
        /paint|layout|strict|content/.test(s.contain);
      if ((pos === 'fixed' || (pos === 'absolute' && s.position === 'static')) && !holds) continue;
      pos = s.position;
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
  // The accessible name a person reads, by the usual precedence: aria-labelledby, aria-label, a <label>
  // (or a label just before it), a table cell control's column header (or its row's header), title,
  // placeholder; a widget's own text for the rest. Never a control's current value (`value`, beside it)
  // and never a string without a letter or digit (Django's empty choice `---------`).
  const named = (s) => /[\p{L}\p{N}]/u.test(s) ? s : '';
  const FORM = new Set(['INPUT', 'TEXTAREA', 'SELECT']);
  const HEADING = 'h1, h2, h3, h4, h5, h6, [role=heading], legend, caption';
  const CONTROLS = 'input, select, textarea, button';
  const textOf = (e) => clean(e.innerText || e.textContent);
  const wordsOf = (e) => clean(e.textContent);  // a heading's words, not as CSS cases them (SHOP)
  function ariaName(el) {
    // labelled by a titled block (Django's "Available permissions" with its help text below): its title
    const by = (el.getAttribute('aria-labelledby') || '').split(/\s+/).map((id) => document.getElementById(id))
      .filter(Boolean).map((e) => e.querySelector('label, ' + HEADING) || e);
    // (not an aria-label that is a code name, "skip-task", or one lowercase word other than the words the
    // button shows, "submit" on Label Studio's Update: the words a person reads)
    const label = clean(el.getAttribute('aria-label'));
    const shown = named(textOf(el));
    const code = shown && (/^[a-z]+(-[a-z]+)+$$/.test(label) ||
      (/^[a-z]+$$/.test(label) && shown.toLowerCase() !== label));
    return named(clean(by.map(textOf).join(' '))) || (code ? '' : named(label));
  }
  function name(el) {
    const aria = ariaName(el);
    if (aria) return aria;
    const tag = el.tagName;
    if (FORM.has(tag) || el.isContentEditable) {
      if (tag === 'INPUT' && ['submit', 'button', 'reset', 'image'].includes(el.type)) {
        return named(clean(el.value || el.alt || el.title));
      }
      const prev = el.previousElementSibling;
      const label = (el.labels && el.labels.length) ? el.labels[0] : (prev && prev.tagName === 'LABEL' ? prev : null);
      return named(label ? labelText(label) : '') || header(el) || named(clean(el.title)) ||
        named(clean(el.placeholder || el.getAttribute('data-placeholder'))) || textBefore(el) || captionAbove(el) ||
        lineBefore(el);
    }
    const own = tag === 'LABEL' ? labelText(el)
      : named(clean(el.innerText || el.getAttribute('title') || el.getAttribute('alt') || el.value));
    return cardTitle(el, own) || rowTitle(el) || own ||
      (el.closest('label') ? labelText(el.closest('label')) : '') || drawnBox(el);
  }
  function rowKey(el) {
    // a row of cells that is one clickable element (Label Studio's data manager: id, counts, a date, the text;
    // in a wrapper): its wordiest cell
    let r = el;
    while (r.children.length === 1) r = r.children[0];
    const cells = Array.from(r.querySelectorAll(':scope > [class*=cell], :scope > [role=cell], ' +
      ':scope > [role=gridcell]'));
    const letters = (c) => (textOf(c).match(/\p{L}/gu) || []).length;
    const key = cells.length > 1 && cells.reduce((a, c) => (letters(c) > letters(a) ? c : a));
    return key && letters(key) ? key : null;
  }
  function rowTitle(el) {
    const key = rowKey(el);   // the row reads as its wordiest cell
    return key ? named(textOf(key)) : '';
  }
  function drawnBox(el) {
    // a box drawn over one checkbox (Label Studio's toggles, a data-manager row's tick box): that checkbox's
    // aria-label, else the short caption just before the drawing (a webhook's "Is Active")
    const inputs = el.querySelectorAll('input');
    if (inputs.length !== 1 || !['checkbox', 'radio'].includes(inputs[0].type)) return '';
    const prev = el.previousElementSibling, words = prev && !prev.querySelector(CONTROLS) ? textOf(prev) : '';
    return ariaName(inputs[0]) || (words.split(' ').length <= 6 ? named(words) : '');
  }
  function cardTitle(el, own) {
    // a link or button that is a whole card (Label Studio's project card: its title, counts, description)
    // reads as the card's title: a short title block whose words come first. (The last fallback in name: a
    // box drawn in a <label> beside its caption, Label Studio's toggle over a hidden checkbox, reads as it.)
    if (own.split(' ').length <= 12) return '';
    const t = el.querySelector(HEADING + ', [class*=title]'), words = t ? named(textOf(t)) : '';
    return words && words.split(' ').length <= 8 && own.startsWith(words) ? words : '';
  }
  function labelText(label) {
    // a <label> wrapping its control ("Action: <select>") reads without the control's options, nor a
    // superscript (a required field's star, Label Studio's hotkey "[3]"); an icon label (a search box's
    // magnifier) by its image's alt text
    const copy = label.cloneNode(true);
    copy.querySelectorAll('select, textarea, input, option, sup').forEach((c) => c.remove());
    const img = label.querySelector('img[alt]');
    return named(clean(copy.textContent)) || (img ? named(clean(img.alt)) : '');
  }
  function header(el) {
    // a control in a table cell: its column's header, else its row's header (a facts table's "Owner")
    const cell = el.closest('td, th, [role=gridcell], [role=cell]'), table = cell && cell.closest('table');
    if (!table || cell.tagName !== 'TD') return '';
    let col = 0;
    for (const c of cell.parentElement.cells) { if (c === cell) break; col += c.colSpan || 1; }
    const head = table.tHead ? table.tHead.rows[table.tHead.rows.length - 1]
      : Array.from(table.rows).find((r) => Array.from(r.cells).every((c) => c.tagName === 'TH'));
    let at = 0;
    for (const c of (head ? head.cells : [])) {
      if (at <= col && col < at + (c.colSpan || 1)) { if (named(wordsOf(c))) return named(wordsOf(c)); break; }
      at += c.colSpan || 1;
    }
    const th = Array.from(cell.parentElement.cells).find((c) => c.tagName === 'TH');
    return th ? named(wordsOf(th)) : '';
  }
  function textBefore(el) {
    // a control right after its caption on one line, with no <label> (Oscar's "Update status of selected
    // reviews <select>"): that text
    const t = el.previousSibling, words = t && t.nodeType === Node.TEXT_NODE ? clean(t.textContent) : '';
    return words.split(' ').length <= 8 ? named(words) : '';
  }
  function lineBefore(el) {
    // a field at the end of a line of words and lists that reads as one phrase (Label Studio's filter line:
    // "Where [text] [contains] [____]"): that phrase, when short -- not past another field or a <label>
    // (an unlabelled select after "Email [____]" is not "Email")
    const r = el.getBoundingClientRect();
    const field = 'input:not([type=hidden]), textarea, label';
    for (let p = el, up = 0; p && p !== document.body && up < 3; p = p.parentElement, up++) {
      const before = [];
      for (let s = p.previousElementSibling; s; s = s.previousElementSibling) {
        const b = s.getBoundingClientRect(), mid = (b.top + b.bottom) / 2;
        if (b.width && (mid < r.top || mid > r.bottom)) return '';   // not one line
        if (s.matches(field) || s.querySelector(field)) return '';
        before.unshift(textOf(s));
      }
      const words = clean(before.join(' '));
      if (words) return words.split(' ').length <= 6 ? named(words) : '';
    }
    return '';
  }
  function captionAbove(el) {
    // a field under a caption that is not its <label>: a grid of <div>s' column heading (a basket's
    // "Quantity"), a small caption over a form ("Assigned to"): the short text just before one of its
    // containers, above it, overlapping it the most
    if (el.closest('table') || ['checkbox', 'radio'].includes(el.type)) return '';   // a table's headers say
    const r = el.getBoundingClientRect();
    const text = (h) => { const range = document.createRange(); range.selectNodeContents(h); return range; };
    const overlap = (h) => { const b = text(h).getBoundingClientRect();   // its words' box, not its block's
      return b.bottom <= r.top + 2 ? Math.min(b.right, r.right) - Math.max(b.left, r.left) : 0; };
    for (let p = el, up = 0; p && p !== document.body && up < 8; p = p.parentElement, up++) {
      const s = p.previousElementSibling;
      if (!s || s.matches(CONTROLS) || s.querySelector(CONTROLS)) continue;
      const over = [s, ...s.querySelectorAll(HEADING + ', [role=columnheader]')].filter((h) =>
        (h !== s || !s.children.length) && h.tagName !== 'H1' && wordsOf(h).split(' ').length <= 4 && overlap(h) > 0);
      over.sort((a, b) => overlap(b) - overlap(a));
      if (over.length && named(wordsOf(over[0]))) return named(wordsOf(over[0]));
    }
    return '';
  }
  const hiddenSelect = (s) => s.getAttribute('aria-hidden') === 'true' || s.getBoundingClientRect().width *
    s.getBoundingClientRect().height <= 4 || !s.checkVisibility();
  function listButton(el) {
    // a button that opens a list, with the hidden <select> it stands for just after it (Label Studio's lists)
    const s = el.nextElementSibling;
    return el.tagName === 'BUTTON' && el.getAttribute('aria-haspopup') && s && s.tagName === 'SELECT' &&
      hiddenSelect(s) ? s : null;
  }
  function standsFor(el) {
    // a widget drawn over a hidden <select> (a select2 box): the <select> just before the widget's outer box,
    // which holds a combobox -- found from any part of it (the value it shows, its own search field). A
    // person reads that select's label as the widget's name, and what it shows as its value.
    const list = listButton(el);
    if (list) return list;
    for (let p = el, up = 0; p && p !== document.body && up < 6; p = p.parentElement, up++) {
      const s = p.previousElementSibling;
      if (!s || s.tagName !== 'SELECT' || !(p.matches('[role=combobox]') || p.querySelector('[role=combobox]'))) {
        continue;
      }
      return hiddenSelect(s) ? s : null;
    }
    return null;
  }
  function value(el) {
    // what a control shows now: a select's chosen option, a field's text (never a password), a box's state,
    // a combobox widget's shown choice
    if (el.tagName === 'SELECT') return clean(Array.from(el.selectedOptions).map((o) => o.text).join(', '));
    if (el.getAttribute('role') === 'combobox' && !FORM.has(el.tagName)) return clean(el.innerText);
    if (el.tagName === 'INPUT' && ['checkbox', 'radio'].includes(el.type)) return el.checked ? 'checked' : '';
    if (el.getAttribute('aria-checked') === 'true' || el.getAttribute('aria-pressed') === 'true') return 'checked';
    if (el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' && !['password', 'hidden', 'submit', 'button',
      'reset', 'image', 'file'].includes(el.type))) return clean(el.value);
    return el.isContentEditable ? clean(el.innerText) : '';
  }
  const LANDMARK = {NAV: 'navigation', ASIDE: 'sidebar', HEADER: 'header', FOOTER: 'footer', MAIN: 'main',
    navigation: 'navigation', complementary: 'sidebar', banner: 'header', contentinfo: 'footer', main: 'main',
    search: 'search'};
  function section(el) {
    // the nearest of: a fieldset's legend, a dialog's title, a heading before it in its own container
    // (or in that container's header block), a landmark (its aria-label, else sidebar / header / ...)
    for (let node = el, p = el.parentElement; p && p !== document.body; node = p, p = p.parentElement) {
      if (p.tagName === 'FIELDSET' && p.querySelector(':scope > legend')) return wordsOf(p.querySelector(':scope > legend'));
      const r = p.getAttribute('role');
      if (p.tagName === 'DIALOG' || r === 'dialog' || r === 'alertdialog') {
        const h = p.querySelector(HEADING);
        return ariaName(p) || (h && named(wordsOf(h))) || 'dialog';
      }
      for (let s = node.previousElementSibling; s; s = s.previousElementSibling) {
        // a header block (a card's, a panel's), not a form row whose class says "field-title", nor an app's
        // bar of links and buttons with no heading (Label Studio's breadcrumbs, whose words run together)
        const header = (/header|heading/i.test(s.className) || s.tagName === 'HEADER') &&
          !s.querySelector('input, select, textarea');
        const titled = header && Array.from(s.querySelectorAll(HEADING)).pop();
        const block = s.matches(HEADING) ? s : titled || (header && !s.querySelector('a, button') ? s : null);
        if (block && named(wordsOf(block))) return wordsOf(block);
      }
      // a <header> or <footer> inside an article, a section, ... is that part's, not the page's landmark
      const scoped = ['HEADER', 'FOOTER'].includes(p.tagName) && p.parentElement &&
        p.parentElement.closest('article, section, aside, nav, main');
      const mark = LANDMARK[r] || (scoped ? '' : LANDMARK[p.tagName]);
      if (mark) return named(clean(p.getAttribute('aria-label'))) || mark;
    }
    return '';
  }
  function row(el) {
    // in a table (or an ARIA grid): the cell that says what the row is -- its header, else its first cell
    // with words (a ticket's title rather than its number); none when that cell is the element's own
    const tr = el.closest('tr, [role=row]');
    if (!tr) return cellRow(el);
    const cells = Array.from(tr.querySelectorAll(':scope > th, :scope > td, :scope > [role=rowheader], ' +
      ':scope > [role=gridcell], :scope > [role=cell]'));
    const words = (c) => /\p{L}/u.test(wordsOf(c));
    const key = cells.find((c) => (c.tagName === 'TH' || c.getAttribute('role') === 'rowheader') && words(c)) ||
      cells.find(words) || cells.find((c) => !c.contains(el) && named(wordsOf(c)));
    return key && !key.contains(el) ? wordsOf(key) : '';
  }
  function cellRow(el) {
    // a row of cells drawn in <div>s, a few levels up (Label Studio's data manager): its wordiest cell
    for (let p = el.parentElement, up = 0; p && p !== document.body && up < 3; p = p.parentElement, up++) {
      const key = p.querySelectorAll(':scope > [class*=cell]').length > 1 && rowKey(p);
      if (key) return key.contains(el) || el.contains(key) ? '' : textOf(key);
    }
    return '';
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
  const elements = items.map((it, i) => {
    const field = standsFor(it.el);   // a widget is named and valued as the field it stands for
    // (a list button over a select with neither a label nor option texts: named by the words of its line
    // before it, "Where [text] [contains]", and valued by what it shows)
    const list = field && listButton(it.el) && !(field.labels && field.labels.length);
    const e = {mark: i + 1, tag: it.el.tagName.toLowerCase(), role: field ? 'combobox' : role(it.el),
               text: list ? lineBefore(it.el) : name(field || it.el),
               bbox: it.box.map((v) => Math.round(v * dpr))};
    // what a guide says beside the name, each only where the page has it: the list stays small; a
    // combobox keeps a value equal to its name (annotate.py lint then sees a widget named by its value)
    const more = {value: list ? textOf(it.el) : value(field || it.el), section: clean(section(it.el)),
                  row: row(it.el)};
    for (const [k, v] of Object.entries(more)) {
      if (v && (v !== e.text || (k === 'value' && e.role === 'combobox'))) e[k] = v;
    }
    return e;
  });
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
