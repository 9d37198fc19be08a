(() => {
  if (window.__magHuman) return;
  const H = window.__magHuman = {events: [], allowClicks: 0, allowKeys: 0};
  const mark = (el) => (window.__mag && window.__mag.markOf) ? window.__mag.markOf(el) : null;
  const isSelect = (el) => el && (el.tagName === 'SELECT' || el.tagName === 'OPTION');
  // The answer box (Ctrl+Shift+S): opened after the step's screenshot, so no screenshot shows it; Enter
  // queues stop(its text), Escape or a click elsewhere closes it. Its own input never becomes a step.
  const inBox = (el) => !!H.box && H.box.contains(el);
  const closeBox = () => { if (H.box) { H.box.remove(); H.box = null; } };
  const openBox = () => {
    if (H.box) return;
    H.box = document.createElement('div');
    H.box.setAttribute('style', 'position:fixed;z-index:2147483647;left:8px;right:8px;top:8px;padding:8px;' +
      'background:#fff;color:#000;border:2px solid #333;font:14px sans-serif;box-shadow:0 2px 8px #0006');
    H.box.textContent = 'Answer, then Enter to stop the episode with it (Escape: back to the page) ';
    const input = document.createElement('input');
    input.setAttribute('style', 'width:60%;font:14px sans-serif');
    input.addEventListener('keydown', (e) => {
      e.stopPropagation();
      if (e.key === 'Enter') { H.events.push({kind: 'stop', value: input.value}); closeBox(); }
      else if (e.key === 'Escape') closeBox();
    });
    H.box.appendChild(input);
    document.documentElement.appendChild(H.box);
    input.focus();
  };
  for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click']) {
    window.addEventListener(type, (e) => {
      if (!e.isTrusted || isSelect(e.target) || inBox(e.target)) return;
      if (type === 'pointerdown') closeBox();
      if (H.allowClicks > 0) { if (type === 'click') H.allowClicks--; return; }  // the harness's replay
      e.preventDefault(); e.stopImmediatePropagation();
      // a cancelled pointerdown suppresses the mouse events after it, so the click is queued here
      if (type === 'pointerdown') H.events.push({kind: 'click', x: e.clientX, y: e.clientY});
    }, true);
  }
  window.addEventListener('keydown', (e) => {
    if (!e.isTrusted || inBox(e.target)) return;
    if (e.ctrlKey && e.shiftKey && e.code === 'KeyS') {
      e.preventDefault(); e.stopImmediatePropagation(); openBox(); return;
    }
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
