(() => {
  if (window.__magHuman) return;
  const H = window.__magHuman = {events: [], allowClicks: 0, allowKeys: 0};
  const mark = (el) => (window.__mag && window.__mag.markOf) ? window.__mag.markOf(el) : null;
  const isSelect = (el) => el && (el.tagName === 'SELECT' || el.tagName === 'OPTION');
  for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click']) {
    window.addEventListener(type, (e) => {
      if (!e.isTrusted || isSelect(e.target)) return;
      if (H.allowClicks > 0) { if (type === 'click') H.allowClicks--; return; }  // the harness's replay
      e.preventDefault(); e.stopImmediatePropagation();
      // a cancelled pointerdown suppresses the mouse events after it, so the click is queued here
      if (type === 'pointerdown') H.events.push({kind: 'click', x: e.clientX, y: e.clientY});
    }, true);
  }
  window.addEventListener('keydown', (e) => {
    if (!e.isTrusted) return;
    if (['Enter', 'Tab', 'Escape'].includes(e.key)) {
      if (H.allowKeys > 0) { H.allowKeys--; return; }
      e.preventDefault(); e.stopImmediatePropagation();
    }
    H.events.push({kind: 'key', key: e.key, mark: mark(document.activeElement)});
  }, true);
  window.addEventListener('change', (e) => {
    const t = e.target;
    if (t && t.tagName === 'SELECT')
      H.events.push({kind: 'select', mark: mark(t), value: t.selectedOptions[0] ? t.selectedOptions[0].text : ''});
  }, true);
})();
