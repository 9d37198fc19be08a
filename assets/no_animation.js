// Animations and transitions end at once and the caret is hidden, so a screenshot depends only on the
// page's state, never on when it was taken. The style goes in as soon as the document has its root
// element, before the parser reaches the body: an autofocused field's focus ring (Bootstrap's 150 ms
// transition) started before DOMContentLoaded and was caught at a different point on every run.
(() => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation-duration: 0s !important; animation-delay: 0s !important;' +
    ' transition-duration: 0s !important; transition-delay: 0s !important; caret-color: transparent !important; }';
  const put = () => {
    if (!document.documentElement) return false;
    if (!style.isConnected) document.documentElement.appendChild(style);
    return true;
  };
  if (!put()) new MutationObserver((_, obs) => { if (put()) obs.disconnect(); }).observe(document, {childList: true});
  // a page that rewrites its whole root (document.write, a new <html>) still gets it once parsed
  document.addEventListener('DOMContentLoaded', () => { if (!style.isConnected) (document.head || document.documentElement).appendChild(style); });
})();
