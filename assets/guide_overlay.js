([mark, point, text, label, action, across]) => {
  const old = document.getElementById('__mag_guide');
  if (old) old.remove();
  const root = document.createElement('div');
  root.id = '__mag_guide';
  // a small page (MiniWoB's 160 px) gets a small tooltip, or it would cover what it points at
  const small = innerWidth < 400;
  root.style.cssText = 'position:fixed;inset:0;pointer-events:none;z-index:2147483647;' +
    `font:${small ? 8 : 14}px/1.3 system-ui,sans-serif`;
  const tip = document.createElement('div');
  tip.style.cssText = `position:fixed;max-width:${Math.min(320, innerWidth * 0.7)}px;background:#1e3a8a;color:#fff;` +
    `padding:${small ? '3px 5px' : '10px 12px'};border-radius:${small ? 4 : 8}px;` +
    'box-shadow:0 6px 20px rgba(15,23,42,.4)';
  const head = document.createElement('div');
  head.style.cssText = `font-size:${small ? 7 : 11}px;opacity:.75;margin-bottom:${small ? 1 : 3}px`;
  head.textContent = label;
  tip.appendChild(head);
  const body = document.createElement('div');
  text.split('**').forEach((part, i) => {   // the guides' **label** in bold; text nodes only, never HTML
    const n = document.createElement(i % 2 ? 'b' : 'span');
    if (i % 2) n.style.color = '#fde68a';
    n.textContent = part;
    body.appendChild(n);
  });
  tip.appendChild(body);
  if (action) {   // the action written with the guide, under it and smaller
    const act = document.createElement('div');
    act.style.cssText = `font:${small ? 6 : 11}px/1.3 ui-monospace,Menlo,Consolas,monospace;color:#bfdbfe;` +
      `margin-top:${small ? 1 : 4}px`;
    act.textContent = action;
    tip.appendChild(act);
  }
  root.appendChild(tip);
  document.body.appendChild(root);
  let el = mark ? (window.__mag && window.__mag.marks[mark - 1]) : null;
  if (!el && point) el = document.elementFromPoint(point[0], point[1]);
  if (!el) {   // no target (press, scroll, stop): a banner at the top
    tip.style.left = (innerWidth - tip.offsetWidth) / 2 + 'px';
    tip.style.top = '12px';
    return null;
  }
  const r = el.getBoundingClientRect();
  const ring = document.createElement('div');
  ring.style.cssText = `position:fixed;left:${r.left - 4}px;top:${r.top - 4}px;` +
    `width:${r.width + 8}px;height:${r.height + 8}px;` +
    'border:3px solid #f59e0b;border-radius:6px;box-sizing:border-box;box-shadow:0 0 0 9999px rgba(15,23,42,.25)';
  root.insertBefore(ring, tip);
  const arrow = document.createElement('div');
  arrow.style.cssText = 'position:fixed;width:0;height:0;border:8px solid transparent';
  const w = tip.offsetWidth, h = tip.offsetHeight, gap = 14, cy = r.top + r.height / 2;
  const top = Math.min(Math.max(8, cy - 18), innerHeight - h - 8);
  // a target in a table row (across): under or over it, or the tooltip would hide the row its guide names
  if (!across && r.right + gap + w < innerWidth) {
    tip.style.left = r.right + gap + 'px'; tip.style.top = top + 'px';
    arrow.style.left = r.right + gap - 16 + 'px'; arrow.style.top = cy - 8 + 'px';
    arrow.style.borderRightColor = '#1e3a8a';
  } else if (!across && r.left - gap - w > 0) {
    tip.style.left = r.left - gap - w + 'px'; tip.style.top = top + 'px';
    arrow.style.left = r.left - gap + 'px'; arrow.style.top = cy - 8 + 'px';
    arrow.style.borderLeftColor = '#1e3a8a';
  } else {
    const below = r.bottom + gap + h < innerHeight;
    const left = Math.min(Math.max(8, r.left), innerWidth - w - 8);
    tip.style.left = left + 'px'; tip.style.top = (below ? r.bottom + gap : r.top - gap - h) + 'px';
    arrow.style.left = Math.min(Math.max(left + 8, r.left + r.width / 2 - 8), left + w - 24) + 'px';
    arrow.style.top = (below ? r.bottom + gap - 16 : r.top - gap) + 'px';
    arrow.style[below ? 'borderBottomColor' : 'borderTopColor'] = '#1e3a8a';
  }
  root.appendChild(arrow);
  const name = el.innerText || el.value || el.getAttribute('aria-label') || '';
  return [el.tagName.toLowerCase(), name.trim().slice(0, 80)];
}
