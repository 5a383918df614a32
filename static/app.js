// Tabletalk's only script of its own: small comforts on top of plain forms.
// Everything works without it (and without htmx); no inline script anywhere, so a strict
// Content-Security-Policy can forbid inline code.
(function () {
  "use strict";

  // The live feed's most frequent fragment: text a Markdown block grew by at its end.
  // <hx-a t=BLOCK-ID d=DEPTH>text</hx-a> appends to the block's last element, DEPTH
  // levels down (1 when d is left out: the commonest, a paragraph's text); a compact form of
  // an hx-partial with a :last-child selector (which cost more bytes than the text it carried).
  htmx.registerExtension("grow", {
    htmx_process_a: function (tpl, detail) {
      var el = document.getElementById(tpl.getAttribute("t"));
      var d = tpl.hasAttribute("d") ? parseInt(tpl.getAttribute("d"), 10) || 0 : 1;
      for (; d > 0 && el; d--) el = el.lastElementChild;
      if (!el) return;
      detail.tasks.push({type: "partial", fragment: tpl.content.cloneNode(true), target: el,
                         swapSpec: {style: "beforeend"}, sourceElement: detail.ctx.sourceElement});
    }
  });

  // Enter sends, Shift+Enter makes a new line (not while an IME is composing).
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.key !== "Enter" || e.shiftKey || e.isComposing || !t.matches || !t.matches("#composer textarea")) return;
    e.preventDefault();
    if (t.value.trim() === "") return;
    t.form.requestSubmit();
  });

  // After htmx posted the composer, empty it; the feed brings the message onto the page.
  document.addEventListener("htmx:after:request", function (e) {
    var form = e.target;
    if (!form || form.id !== "composer") return;
    var ctx = e.detail && e.detail.ctx;
    var ok = ctx && ctx.response && ctx.response.status < 400;
    if (ok) { form.reset(); var t = form.querySelector("textarea"); if (t) t.focus(); }
  });

  // Keep the newest part of the conversation in view while it grows, unless the person scrolled up.
  var stick = true;
  window.addEventListener("scroll", function () {
    stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }, { passive: true });
  document.addEventListener("htmx:after:swap", function () {
    if (stick) window.scrollTo(0, document.body.scrollHeight);
  });
})();
