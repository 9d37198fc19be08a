([css, text, nth]) => {
  // collect.py's expert policy: the mark of the nth element matching a CSS selector (and, when text
  // is not null, whose whitespace-normalised text equals it); -1 when there is no such element.
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const els = [...document.querySelectorAll(css)].filter((e) => text === null || norm(e.textContent) === text);
  return els[nth] ? window.__mag.markOf(els[nth]) : -1;
}
