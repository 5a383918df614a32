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

  // Enter sends, Shift+Enter makes a new line (not while an IME is composing). On a touch
  // screen return makes a new line, as a phone's keyboard promises, and the arrow sends.
  var touch = !!(window.matchMedia && matchMedia("(hover: none) and (pointer: coarse)").matches);
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (touch || e.key !== "Enter" || e.shiftKey || e.isComposing || !t.matches || !t.matches("#composer textarea")) return;
    e.preventDefault();
    if (t.value.trim() === "") return;
    t.form.requestSubmit();
  });

  // After htmx posted the composer, empty it; the feed brings the message onto the page.
  // Only of what that post carried (htmx read the form when it was sent): a message typed
  // while the post was on its way is the next one and stays in the box (its files too).
  document.addEventListener("htmx:after:request", function (e) {
    var form = e.target;
    if (!form || form.id !== "composer") return;
    var ctx = e.detail && e.detail.ctx;
    var ok = ctx && ctx.response && ctx.response.status < 400;
    if (!ok) return;
    var body = ctx.request && ctx.request.body, t = form.querySelector("textarea");
    var sent = body && typeof body.get === "function" ? body.get("text") : null;
    if (sent === null || !t || lines(t.value) === lines(sent)) { form.reset(); if (t) t.focus(); return; }
    var gone = (body.getAll("file") || []).map(fileKey);
    picked = picked.filter(function (f) { return gone.indexOf(fileKey(f)) < 0; });
    if (canSet) setFiles(form);
  });
  function lines(text) { return String(text).replace(/\r\n?/g, "\n"); }
  function fileKey(f) { return f && f.name !== undefined ? f.name + "/" + f.size + "/" + f.lastModified : ""; }

  // --- The composer: auto-size, picked files as chips, drag and drop, paste, sticky pickers ---
  // Without script the same form works as it is: CSS sizes the box (field-sizing), the native
  // file input shows what is picked, and the pickers are sent with the message.
  function composer() { return document.getElementById("composer"); }
  function fit(ta) {
    ta.style.height = "auto";
    ta.style.height = ta.scrollHeight + "px"; // CSS caps it (max-height) and scrolls beyond
  }
  var picked = [];   // the files to send: the file input's list is rebuilt from this
  var urls = [];     // thumbnails' object URLs, revoked when the chips are redrawn
  var canSet = (function () { try { return !!new DataTransfer(); } catch (err) { return false; } })();
  function sizeText(n) {
    if (n < 1000) return n + " B";
    var units = ["KB", "MB", "GB"];
    for (var i = 0; i < units.length; i++) {
      n /= 1000;
      if (n < 999.5 || i === units.length - 1) return (n < 9.95 ? n.toFixed(1) : Math.round(n)) + " " + units[i];
    }
  }
  function drawChips(form) {
    var list = form.querySelector(".picked-files"), input = form.querySelector('input[type="file"]');
    if (!list || !input) return;
    urls.forEach(URL.revokeObjectURL); urls = [];
    list.textContent = "";
    picked.forEach(function (f, i) {
      var li = document.createElement("li");
      if (/^image\//.test(f.type)) {
        var img = document.createElement("img");
        var url = URL.createObjectURL(f); urls.push(url);
        img.src = url; img.alt = "";
        li.appendChild(img);
      } else {
        var ext = document.createElement("span"); ext.className = "ext";
        ext.textContent = (/\.([a-z0-9]{1,4})$/i.exec(f.name) || [, "file"])[1].toUpperCase();
        li.appendChild(ext);
      }
      var name = document.createElement("span"); name.className = "name"; name.textContent = f.name;
      var size = document.createElement("span"); size.className = "size"; size.textContent = sizeText(f.size);
      var remove = document.createElement("button");
      remove.type = "button"; remove.className = "remove"; remove.textContent = "×";
      remove.setAttribute("aria-label", "Remove " + f.name);
      remove.addEventListener("click", function () { picked.splice(i, 1); setFiles(form); input.focus(); });
      li.append(name, size, remove);
      list.appendChild(li);
    });
    list.hidden = picked.length === 0;
  }
  function setFiles(form) {
    var input = form.querySelector('input[type="file"]');
    var dt = new DataTransfer();
    picked.forEach(function (f) { dt.items.add(f); });
    input.files = dt.files;
    drawChips(form);
  }
  function addFiles(form, files) {
    if (!canSet || !files || !files.length) return false;
    for (var i = 0; i < files.length; i++) picked.push(files[i]);
    setFiles(form);
    return true;
  }
  function offerThinking(form, models) {
    var thinking = form.querySelector("select.thinking-pick"), mark = form.querySelector(".no-thinking");
    var picked = models.options[models.selectedIndex];
    if (!thinking || !mark || !picked) return;
    var thinks = picked.hasAttribute("data-thinks");
    thinking.hidden = !thinks; mark.hidden = thinks;
    if (!thinks) thinking.value = "";
  }
  function setUp() {
    var form = composer();
    if (!form) return;
    var ta = form.querySelector("textarea");
    // what Enter does is said only with script, which makes it send (a touch screen's return does not)
    var said = ta && (touch ? ta.dataset.touchPlaceholder : ta.dataset.jsPlaceholder);
    if (said) ta.placeholder = said;
    if (ta) { fit(ta); ta.addEventListener("input", function () { fit(ta); }); }
    var input = form.querySelector('input[type="file"]');
    if (input && canSet) input.addEventListener("change", function () {
      // a new pick adds to the files already picked (the input alone would replace them)
      var chosen = Array.prototype.slice.call(input.files);
      picked = picked.concat(chosen);
      setFiles(form);
    });
    form.addEventListener("reset", function () {
      setTimeout(function () { picked = []; drawChips(form); if (ta) fit(ta); }, 0);
    });
    ["dragenter", "dragover"].forEach(function (type) {
      form.addEventListener(type, function (e) {
        if (!canSet || !e.dataTransfer || Array.prototype.indexOf.call(e.dataTransfer.types, "Files") < 0) return;
        e.preventDefault();
        form.classList.add("dropping");
      });
    });
    form.addEventListener("dragleave", function (e) {
      if (!form.contains(e.relatedTarget)) form.classList.remove("dropping");
    });
    form.addEventListener("drop", function (e) {
      form.classList.remove("dropping");
      if (e.dataTransfer && addFiles(form, e.dataTransfer.files)) e.preventDefault();
    });
    if (ta) ta.addEventListener("paste", function (e) {
      var data = e.clipboardData;
      if (data && data.files && data.files.length && addFiles(form, data.files) && !data.getData("text/plain")) e.preventDefault();
    });
    // A model or thinking level picked sticks: reset keeps it, and the conversation stores it.
    // The Thinking picker is offered for a model that thinks (its option says data-thinks);
    // for another a mark stands in its place, and no level stays picked for it. (On the form:
    // the model picker is swapped anew while a server is down.)
    form.addEventListener("change", function (e) {
      var sel = e.target;
      if (!sel.matches || !sel.matches("select.pick")) return;
      if (sel.name === "model") offerThinking(form, sel);
      [sel, form.elements.namedItem("thinking")].forEach(function (s) {
        if (s && s.options) Array.prototype.forEach.call(s.options, function (o) { o.defaultSelected = o.selected; });
      });
      var url = form.dataset.choiceUrl;
      if (!url) return;
      var body = new FormData();
      ["_csrf_token", "model", "thinking"].forEach(function (name) {
        var field = form.elements.namedItem(name);
        if (field) body.append(name, field.value);
      });
      fetch(url, {method: "POST", body: body, credentials: "same-origin", headers: {"HX-Request": "true"}});
    });
    // A conversation opens at its newest message (unless the address names another place).
    if (document.getElementById("items") && (!location.hash || location.hash === "#end")) {
      window.scrollTo(0, document.body.scrollHeight);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp); else setUp();

  // Copy. A control with data-copy puts text on the clipboard: data-copy="" copies the text
  // at its href (a link to the raw text: what a person without JavaScript gets instead),
  // data-copy="SELECTOR" the text of the nearest such element around it (a code block's
  // <code>; a field's value, as a new API key's). Controls that only work with script carry
  // class "js-only" (hidden without it).
  document.documentElement.classList.add("js");
  function nearText(c, sel) {
    for (var el = c.parentElement; el; el = el.parentElement) {
      var t = el.querySelector(sel);
      if (t) return t.tagName === "INPUT" || t.tagName === "TEXTAREA" ? t.value : t.textContent;
    }
    return "";
  }
  function fallbackCopy(text) {
    var ta = document.createElement("textarea");
    ta.value = text; ta.setAttribute("readonly", ""); ta.style.position = "fixed"; ta.style.opacity = "0";
    document.body.appendChild(ta); ta.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
    ta.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }
  function copied(c, ok) {
    var label = c.getAttribute("data-label") || c.textContent;
    c.setAttribute("data-label", label);
    c.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(function () { c.textContent = label; }, 1500);
  }
  document.addEventListener("click", function (e) {
    var c = e.target.closest && e.target.closest("[data-copy]");
    if (!c) return;
    e.preventDefault();
    var sel = c.getAttribute("data-copy");
    var text = sel ? Promise.resolve(nearText(c, sel))
                   : fetch(c.href, {credentials: "same-origin"}).then(function (r) {
                       if (!r.ok) throw new Error(r.status); return r.text(); });
    var done;
    if (navigator.clipboard && window.isSecureContext) {
      // A promise inside ClipboardItem keeps the click's permission while the text loads (Safari).
      done = (window.ClipboardItem && navigator.clipboard.write)
        ? navigator.clipboard.write([new ClipboardItem({"text/plain": text.then(function (t) {
            return new Blob([t], {type: "text/plain"}); })})]).catch(function () {
            return text.then(function (t) { return navigator.clipboard.writeText(t); }); })
        : text.then(function (t) { return navigator.clipboard.writeText(t); });
    } else {
      done = text.then(fallbackCopy);
    }
    done.then(function () { copied(c, true); }, function () { copied(c, false); });
  });

  // --- The sidebar (issue 13) ---------------------------------------------------------------
  // Rows come from the live feed, rendered once for every page: the page marks its own
  // conversation (aria-current) again whenever the list changes.
  function markCurrent(list) {
    list.querySelectorAll("a.open").forEach(function (a) {
      if (a.getAttribute("href") === location.pathname) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    });
  }
  // Typing in its search box filters the rows by title at once (a heading whose rows are all
  // filtered out goes too); Enter still searches every message (/search).
  var sideQ = document.getElementById("side-q"), filtered = document.getElementById("side-filtered");
  function folded(text) { return text.normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase(); }
  function filterSide(list) {
    var typed = sideQ ? sideQ.value.trim() : "", word = folded(typed), shown = 0, heading = null, under = 0;
    function closeHeading() { if (heading) heading.hidden = !!word && under === 0; }
    Array.prototype.forEach.call(list.children, function (li) {
      if (li.classList.contains("group")) { closeHeading(); heading = li; under = 0; return; }
      var a = li.querySelector("a.open"), keep = !word || (!!a && folded(a.textContent).indexOf(word) >= 0);
      li.hidden = !keep;
      if (keep) { shown++; under++; }
    });
    closeHeading();
    if (filtered) filtered.textContent = !word ? "" : (shown ? shown + (shown === 1 ? " title has " : " titles have ") + "“" + typed + "”."
                                                           : "No title has “" + typed + "”.") + " Enter searches the messages too.";
  }
  var list = document.getElementById("conversations");
  if (list && sideQ) {
    if (sideQ.dataset.filterPlaceholder) sideQ.placeholder = sideQ.dataset.filterPlaceholder;
    sideQ.addEventListener("input", function () { filterSide(list); });
  }
  if (list && window.MutationObserver) {  // live rows come filtered as the box says
    new MutationObserver(function () { markCurrent(list); if (sideQ && sideQ.value.trim()) filterSide(list); })
      .observe(list, {childList: true});
  }

  // Rename in place: the row's title becomes a field; Enter (or leaving it) saves, Esc keeps
  // the title. Without script the Rename link opens a page with a form.
  document.addEventListener("click", function (e) {
    var r = e.target.closest && e.target.closest("a[data-rename]");
    var row = r && r.closest("li.convo");
    var link = row ? row.querySelector("a.open") : r && r.closest("#chat-menu") && document.getElementById("title");
    var form = document.getElementById("side-form");
    if (!link || !form) return;
    e.preventDefault();
    var menu = r.closest("details");
    if (menu) menu.open = false;
    var input = document.createElement("input");
    input.type = "text"; input.className = "rename-field"; input.value = link.textContent; input.maxLength = 80;
    input.setAttribute("aria-label", "New title");
    link.hidden = true; link.after(input); input.focus(); input.select();
    var ended = false;
    function end(save) {
      if (ended) return;
      ended = true;
      var title = input.value.trim();
      function back() { input.remove(); link.hidden = false; }
      if (!save || !title || title === link.textContent) { back(); link.focus(); return; }
      var body = new URLSearchParams({_csrf_token: form.querySelector("[name=_csrf_token]").value, title: title});
      fetch("/c/" + r.getAttribute("data-rename") + "/rename", {method: "POST", body: body, credentials: "same-origin",
                                                                 headers: {"HX-Request": "true"}})
        .then(function (res) {
          if (!res.ok) { link.title = "The title was not saved"; return; }
          link.textContent = title;
          if (link.hasAttribute("title")) link.title = title;
        })
        .finally(back);  // the live list brings the row as saved
    }
    input.addEventListener("keydown", function (k) {
      if (k.key === "Enter") { k.preventDefault(); end(true); }
      else if (k.key === "Escape") { k.preventDefault(); end(false); }
    });
    input.addEventListener("blur", function () { end(true); });
  });

  // --- Menus (⋯ by a sidebar row, by a conversation's title): a <details>, which opens without
  // script; with it one is open at a time, and Esc or a click elsewhere closes it.
  var MENUS = "details.acts[open], details.menu[open]";
  document.addEventListener("click", function (e) {
    document.querySelectorAll(MENUS).forEach(function (d) { if (!d.contains(e.target)) d.open = false; });
  });
  document.addEventListener("toggle", function (e) {  // (toggle does not bubble: caught on its way down)
    var d = e.target;
    if (!d.open || !d.matches || !d.matches(MENUS)) return;
    document.querySelectorAll(MENUS).forEach(function (o) { if (o !== d) o.open = false; });
  }, true);
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || e.isComposing) return;
    var open = document.querySelectorAll(MENUS);
    if (!open.length) return;
    e.preventDefault(); e.stopImmediatePropagation();  // Esc closes the menu, and stops no answer
    open.forEach(function (d) {
      var inside = d.contains(document.activeElement);
      d.open = false;
      if (inside) d.querySelector("summary").focus();
    });
  }, true);

  // "Again with another model": the ▾ beside Again opens a small menu of the models (the page's
  // own form, ?menu=1); the button pressed makes the answer again with that model. Esc or a
  // click elsewhere closes it. Without script the ▾ is a link to the same choice as a page.
  function closeAgain(back) {
    document.querySelectorAll(".again-wrap .again-menu").forEach(function (m) {
      var link = m.parentNode.querySelector("a.again-with");
      m.remove();
      if (link) { link.setAttribute("aria-expanded", "false"); if (back) link.focus(); }
    });
  }
  document.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("a.again-with");
    if (!link) { if (!e.target.closest || !e.target.closest(".again-menu")) closeAgain(false); return; }
    e.preventDefault();
    var wrap = link.parentNode, open = wrap.querySelector(".again-menu");
    closeAgain(false);
    if (open) return;
    link.setAttribute("aria-haspopup", "true");
    fetch(link.href + "?menu=1", {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error(r.status); return r.text();
    }).then(function (html) {
      var menu = new DOMParser().parseFromString(html, "text/html").querySelector("form.again-menu");
      if (!menu || !link.isConnected) return;
      menu = document.importNode(menu, true);
      wrap.appendChild(menu);
      link.setAttribute("aria-expanded", "true");
      var dock = document.querySelector(".dock"), room = dock ? dock.getBoundingClientRect().top : innerHeight;
      if (menu.getBoundingClientRect().bottom > room) menu.classList.add("up");  // no room below: above it
      var first = menu.querySelector("button");
      if (first) first.focus();
    }).catch(function () { location.assign(link.href); });  // the page, then
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && document.querySelector(".again-wrap .again-menu")) {
      e.preventDefault(); e.stopImmediatePropagation();
      closeAgain(true);
    }
  }, true);
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form.matches || !form.matches(".again-menu")) return;
    e.preventDefault();
    var data = new FormData(form);
    if (e.submitter && e.submitter.name) data.append(e.submitter.name, e.submitter.value);
    fetch(form.action, {method: "POST", body: data, credentials: "same-origin", headers: {"HX-Request": "true"}})
      .then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error(t || r.status); });
        closeAgain(false);
        var box = composerBox();
        if (box) box.focus();  // Again hides itself while the new version is written
      }).catch(function (err) {
        var p = form.querySelector(".error") || form.appendChild(document.createElement("p"));
        p.className = "error"; p.setAttribute("role", "alert"); p.textContent = String(err.message || err);
      });
  });

  // A picker that only changes what the page shows (the new conversation's agent) applies at once.
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t.matches && t.matches("select[data-autosubmit]") && t.form) t.form.requestSubmit();
  });

  // --- Edit a message in place (issue 12: branches) ---
  // The Edit link opens ?edit=ID (the page with the message's form: the way without script).
  // With script the same form is made in place: the message's raw text (from its Copy link)
  // in a textarea; "Save and send" posts it with the page's CSRF token (the #decide form's),
  // and the feed then brings the new branch; Cancel (or Escape) puts the message back.
  function csrfToken() {
    var t = document.querySelector('#decide input[name="_csrf_token"]');
    return t ? t.value : "";
  }
  function button(label, cls) {
    var b = document.createElement("button");
    b.type = "button"; b.textContent = label; if (cls) b.className = cls;
    return b;
  }
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[data-edit]");
    if (!a) return;
    var article = a.closest("article"), body = article && article.querySelector(".body");
    var copy = article && article.querySelector("a[data-copy]");
    if (!body || !copy) return;
    e.preventDefault();
    if (article.querySelector(".edit")) return;
    fetch(copy.href, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error(r.status); return r.text();
    }).then(function (text) {
      var box = document.createElement("div"), ta = document.createElement("textarea");
      var row = document.createElement("div"), problem = document.createElement("p");
      var cancel = button("Cancel", "cancel"), save = button("Save and send");
      var actions = article.querySelector(".message-actions");
      box.className = "edit"; row.className = "edit-buttons"; problem.className = "error"; problem.hidden = true;
      problem.setAttribute("role", "alert");
      ta.value = text; ta.rows = Math.min(12, text.split("\n").length + 1); ta.required = true;
      ta.setAttribute("aria-label", "Edit your message");
      row.append(cancel, save); box.append(ta, problem, row);
      body.hidden = true; if (actions) actions.hidden = true;
      body.after(box); ta.focus();
      function close() { box.remove(); body.hidden = false; if (actions) actions.hidden = false; a.focus(); }
      cancel.addEventListener("click", close);
      ta.addEventListener("keydown", function (k) { if (k.key === "Escape") close(); });
      save.addEventListener("click", function () {
        if (ta.value.trim() === "") { ta.reportValidity(); return; }
        var data = new FormData();
        data.append("_csrf_token", csrfToken()); data.append("text", ta.value);
        save.disabled = true;
        fetch(a.getAttribute("data-edit"), {method: "POST", body: data, credentials: "same-origin",
                                             headers: {"HX-Request": "true"}}).then(function (r) {
          if (r.ok) { if (box.isConnected) close(); return; }
          return r.text().then(function (t) { throw new Error(t || r.status); });
        }).catch(function (err) {
          save.disabled = false; problem.hidden = false; problem.textContent = String(err.message || err);
        });
      });
    }).catch(function () { window.location.href = a.href; });  // the page's own form, then
  });

  // ---- Keyboard and focus (issue 13). Shortcuts never take a key typed into a text field,
  // except Esc (stop a run) and Shift+Esc (to the message box); the list is /help/keys.
  function composerBox() { return document.querySelector("#composer textarea"); }
  function typing(t) {
    return t && t.closest && !!t.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']");
  }
  function running() { return !!document.querySelector('#status[data-running="1"]'); }
  function stopForm() {
    var b = document.querySelector('[hx-post$="/stop"]');
    return b && (b.form || b);
  }
  // Approve, Decline, Again and Stop go away (the live feed replaces them) while their request runs:
  // focus goes to the message box as they are used, not to the page's body. (Sending keeps it
  // there: see the composer's handler above.)
  document.addEventListener("htmx:before:request", function (e) {
    var el = e.target, url = el && el.getAttribute && (el.getAttribute("hx-post") || "");
    if (!url || !/\/(stop|calls\/\d+|again)$/.test(url)) return;
    var box = composerBox();
    if (box) box.focus();
  });
  var helpDialog = null;
  function showHelp() {
    if (helpDialog) { helpDialog.showModal(); return; }
    fetch("/help/keys", {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var list = new DOMParser().parseFromString(html, "text/html").querySelector("#keys");
      if (!list) return;
      helpDialog = document.createElement("dialog");
      helpDialog.className = "keys";
      helpDialog.setAttribute("aria-labelledby", "keys-title");
      var h = list.querySelector("h1");
      if (h) { var h2 = document.createElement("h2"); h2.id = "keys-title"; h2.textContent = h.textContent; h.replaceWith(h2); }
      list.removeAttribute("id");
      var form = document.createElement("form");
      form.method = "dialog";
      var close = document.createElement("button");
      close.textContent = "Close";
      form.appendChild(close);
      list.appendChild(form);
      helpDialog.appendChild(document.importNode(list, true));
      document.body.appendChild(helpDialog);
      helpDialog.showModal();
    }).catch(function () { location.assign("/help/keys"); });
  }
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.isComposing || document.querySelector("dialog[open]")) return;
    var t = e.target, inField = typing(t), box = composerBox();
    if (e.key === "Escape" && e.shiftKey) {
      var to = box || document.querySelector("input[type=search]");
      if (to) { e.preventDefault(); to.focus(); }
      return;
    }
    if (e.key === "Escape" && !e.ctrlKey && !e.altKey && !e.metaKey) {
      var stop = running() && stopForm();
      if (stop) { e.preventDefault(); stop.requestSubmit ? stop.requestSubmit() : stop.submit(); }
      return;
    }
    if ((e.ctrlKey || e.metaKey) && e.shiftKey && !e.altKey && (e.key === "O" || e.key === "o")) {
      e.preventDefault();
      var start = document.querySelector("[data-shortcut=new]");
      if (start) start.click(); else location.assign("/");
      return;
    }
    if (inField || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") {
      var target = box || document.querySelector("input[type=search]");
      if (target) { e.preventDefault(); target.focus(); }
    } else if (e.key === "?") {
      e.preventDefault();
      showHelp();
    }
  });
  // "Saved" arrives with the page after a form's redirect: a status region's first content is
  // not read out, so it changes once the page is up (a no-break space more: nothing to see).
  document.querySelectorAll(".saved[role=status]").forEach(function (el) {
    var words = el.textContent;
    if (words) setTimeout(function () { el.textContent = words + "\u00a0"; }, 150);
  });

  // Keep the newest part of the conversation in view while it grows, unless the person scrolled
  // up; then ↓ (in the dock) shows, and takes them back to it.
  var stick = true, latest = document.querySelector(".dock .to-latest");
  window.addEventListener("scroll", function () {
    stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    if (latest) latest.hidden = stick;
  }, { passive: true });
  if (latest) latest.addEventListener("click", function () {
    var keyboard = latest.matches(":focus-visible");
    stick = true;
    latest.hidden = true;
    window.scrollTo(0, document.body.scrollHeight);
    var box = composerBox();
    if (keyboard && box) box.focus({preventScroll: true});  // not left on a button that went away
  });
  // Only a conversation's page follows its end: elsewhere (an agent's page, the account) the
  // sidebar's live rows are swapped in too, and must not move the page.
  document.addEventListener("htmx:after:swap", function () {
    if (stick && document.getElementById("items")) window.scrollTo(0, document.body.scrollHeight);
  });

  // --- reliability: a refused message says why in the composer (a full disk, a large file)
  document.addEventListener("htmx:after:request", function (e) {
    var f = e.target, c = e.detail && e.detail.ctx, st = c && c.response ? c.response.status : 0;
    if (!f || f.id !== "composer") return;
    var b = document.getElementById("composer-error");
    if (st && st < 400) { if (b) b.remove(); return; }
    if (!b) { b = document.createElement("p"); b.id = b.className = "composer-error"; b.setAttribute("role", "alert"); f.prepend(b); }
    b.textContent = st && c.text ? c.text.slice(0, 500) : "Not sent: the server did not answer.";
  });

  // --- local-server: the tab's title follows the conversation's as the live feed renames it
  // (the feed sends #title with every update; a title the model gave arrives that way).
  var heading = document.getElementById("title");
  if (heading && heading.parentNode) {
    var suffix = " · Tabletalk", follow = function () {
      var h = document.getElementById("title"), want = h && h.textContent.trim() + suffix;
      if (want && document.title !== want) document.title = want;
    };
    new MutationObserver(follow).observe(heading.parentNode, { childList: true });  // #title is swapped whole
  }

  // --- prompts (mcp-a): "/" at the start of the composer shows the agent's prompts, the skills,
  // the resources and the person's knowledge over it (the page /c/N/prompts, its list alone);
  // typing on filters them, Enter opens the first one's form, Escape closes. Their forms post as
  // they do on the page. "#" shows the same at the knowledge, typing on filters collections and
  // documents by name.
  (function () {
    var link = document.querySelector("#composer .prompts-link"), box = composerBox();
    if (!link || !box) return;
    var pop = null;
    function close() { if (pop) { pop.remove(); pop = null; } }
    function shown() {
      return pop ? Array.prototype.filter.call(pop.querySelectorAll("details.prompt"), function (d) { return !d.hidden; }) : [];
    }
    function filter() {
      if (!pop) return;
      var hash = box.value.charAt(0) === "#", word = box.value.replace(/^[\/#]/, "").trim().toLowerCase();
      pop.querySelectorAll("details.prompt").forEach(function (d) {
        var name = (d.querySelector("summary code") || {}).textContent || "";
        d.hidden = !!word && !hash && name.toLowerCase().indexOf(word) < 0;
      });
      pop.querySelectorAll("form.picks label.check").forEach(function (l) {
        var name = (l.querySelector("input") || { getAttribute: function () { return ""; } }).getAttribute("data-name") || "";
        l.hidden = !!word && hash && name.toLowerCase().indexOf(word) < 0;
        l.removeAttribute("data-context");
      });
      var any = false;
      pop.querySelectorAll("form.picks ul.pickable > li").forEach(function (li) {
        var own = li.querySelector(":scope > label.check"), docs = li.querySelector("details");
        var docShown = !!(docs && docs.querySelector("label.check:not([hidden])"));
        if (hash && word) {
          if (docs) docs.open = docShown;  // a document that matches shows, its collection's list opened
          if (own && own.hidden && docShown) {  // ... under its collection's name, which Enter passes by
            own.hidden = false;
            own.setAttribute("data-context", "");
          }
        }
        li.hidden = !!(own && own.hidden) && !docShown;
        if (docs) docs.hidden = !!(hash && word) && !docShown;  // no empty "Or one of its documents"
        if (!li.hidden) any = true;
      });
      var picks = pop.querySelector("form.picks");
      if (picks) {  // "#" and a name nothing has: said, and nothing to send
        var none = picks.querySelector(".no-match"), nothing = hash && !!word && !any;
        if (!none) {
          none = document.createElement("p");
          none.className = "muted no-match";
          none.setAttribute("role", "status");
          picks.querySelector("ul.pickable").after(none);
        }
        none.hidden = !nothing;
        none.textContent = nothing ? "Nothing of your knowledge is named “" + word + "”." : "";
        var send = picks.querySelector("button[type=submit]");
        if (send) send.disabled = nothing;
      }
      pop.classList.toggle("knowledge-only", hash);  // "#": the person's knowledge alone
    }
    function open() {
      if (pop) { filter(); return; }
      pop = document.createElement("div");
      pop.className = "prompt-popover";
      pop.setAttribute("role", "dialog");
      pop.setAttribute("aria-label", "Prompts, skills, resources and knowledge");
      pop.textContent = "Loading prompts…";
      var composerNow = document.getElementById("composer");
      pop.style.setProperty("--composer-h", composerNow.offsetHeight + "px");
      composerNow.before(pop);
      var mine = pop;
      fetch(link.getAttribute("data-prompts"), { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : Promise.reject(r.status);
      }).then(function (html) {
        if (pop !== mine) return;
        pop.innerHTML = html;
        var attachButton = pop.querySelector("form.resources button[type=submit]");
        if (attachButton) attachButton.textContent = "Attach to the message";
        var pickButton = pop.querySelector("form.picks button[type=submit]");
        if (pickButton) pickButton.textContent = "Search them for the message";
        pop.querySelectorAll("form.resources label:has(textarea), form.picks label:has(textarea)").forEach(function (l) {
          l.hidden = true;  // the composer's own box is the message
        });
        filter();
      }, function () { if (pop === mine) pop.textContent = "The prompts could not be read: open the page instead."; });
    }
    box.addEventListener("input", function () {
      var first = box.value.charAt(0);
      if ((first === "/" || first === "#") && box.value.indexOf("\n") < 0) open(); else close();
    });
    document.addEventListener("keydown", function (e) {
      if (!pop || e.target !== box) return;
      if (e.key === "Escape") { e.preventDefault(); e.stopImmediatePropagation(); close(); }
      else if (e.key === "Enter" && !e.shiftKey && box.value.charAt(0) === "#") {
        // "#": Enter goes to the first collection or document shown, to tick it (Space)
        var pick = Array.prototype.find.call(pop.querySelectorAll("form.picks label.check"), function (l) {
          return !l.hidden && l.offsetParent !== null && !l.hasAttribute("data-context");
        });
        if (pick) { e.preventDefault(); e.stopImmediatePropagation(); pick.querySelector("input").focus(); }
      }
      else if (e.key === "Enter" && !e.shiftKey && shown().length) {
        e.preventDefault(); e.stopImmediatePropagation();
        var first = shown()[0];
        first.open = true;
        var field = first.querySelector("input:not([type=hidden]), textarea, button");
        if (field) field.focus();
      }
    }, true);
    link.addEventListener("click", function (e) { e.preventDefault(); if (pop) close(); else { open(); } });
    // Resources ticked in the list are attached to the message being written (chips beside
    // the files; the composer sends them as `resource` fields, read into files when it is sent).
    var composer = document.getElementById("composer");
    function chips() {
      var list = composer.querySelector("ul.picked-resources");
      if (!list) {
        list = document.createElement("ul");
        list.className = "picked-resources";
        list.setAttribute("aria-label", "Resources to attach and knowledge to search");
        composer.querySelector(".box").prepend(list);
      }
      return list;
    }
    function attach(field_name, value, label) {
      if (composer.querySelector('input[name=' + field_name + '][value="' + CSS.escape(value) + '"]')) return;
      var field = document.createElement("input");
      field.type = "hidden"; field.name = field_name; field.value = value;
      composer.append(field);
      var chip = document.createElement("li"), name = document.createElement("span"), x = document.createElement("button");
      name.textContent = label;
      x.type = "button"; x.textContent = "×";
      x.setAttribute("aria-label", (field_name === "knowledge" ? "Do not search " : "Do not attach ") + label);
      x.addEventListener("click", function () { field.remove(); chip.remove(); box.focus(); });
      chip.append(name, x);
      chips().append(chip);
    }
    document.addEventListener("submit", function (e) {
      var form = e.target;
      if (!pop || !pop.contains(form) || !(form.classList.contains("resources") || form.classList.contains("picks"))) return;
      e.preventDefault();
      form.querySelectorAll("input[name=resource]:checked, input[name=knowledge]:checked").forEach(function (c) {
        attach(c.name, c.value, c.getAttribute("data-name") || c.value);
      });
      var first = box.value.charAt(0);
      if (first === "/" || first === "#") box.value = "";
      close();
      box.focus();
    }, true);
    document.addEventListener("htmx:after:request", function (e) {
      var c = e.detail && e.detail.ctx, st = c && c.response ? c.response.status : 0;
      if (e.target !== composer || !st || st >= 400) return;
      composer.querySelectorAll("input[name=resource], input[name=knowledge]").forEach(function (f) { f.remove(); });
      var list = composer.querySelector("ul.picked-resources");
      if (list) list.remove();
    });
  })();
  // --- A model's file uploaded on /model (app/web/model_upload.py) ---
  // Without script the form posts the file (multipart) and the page comes back with the result.
  // With it, the file itself is the body of an XMLHttpRequest (read from disk as it is sent,
  // never whole in memory), so the page shows how far it got, then the model listed. After a
  // cut (the network, a server restart) it asks the server how much of the file it has and
  // sends the rest (Content-Range), up to UPLOAD_TRIES times; the same file chosen again later
  // goes on from there too: its upload's key is kept in localStorage by the file's name, size
  // and date.
  var UPLOAD_TRIES = 6;
  function uploadKey(file) {
    var id = "tabletalk-upload:" + fileKey(file), key = null;
    try { key = localStorage.getItem(id); } catch (err) { /* storage refused: this page's key only */ }
    if (!key) {
      var bytes = new Uint8Array(12);
      crypto.getRandomValues(bytes);
      key = Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
      try { localStorage.setItem(id, key); } catch (err) { /* as above */ }
    }
    return {id: id, key: key, forget: function () { try { localStorage.removeItem(id); } catch (err) { /* as above */ } }};
  }
  function megabytes(n) {
    return (n / 1e6).toLocaleString(undefined, {maximumFractionDigits: n < 1e7 ? 1 : 0}) + " MB";
  }
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form || form.id !== "model-upload") return;
    var input = form.querySelector('input[type="file"]'), file = input && input.files && input.files[0];
    if (!file || !window.XMLHttpRequest || !window.crypto) return;  // the plain form, then
    e.preventDefault();
    var token = form.querySelector('input[name="_csrf_token"]').value;
    var send = form.querySelector('button[type="submit"]'), stop = form.querySelector(".upload-stop");
    var shown = form.querySelector(".upload-progress"), bar = shown.querySelector("progress");
    var count = shown.querySelector(".upload-count"), status = form.querySelector(".upload-status");
    var k = uploadKey(file), tries = 0, xhr = null, stopped = false, name = file.name;
    function say(text, bad) { status.textContent = text; status.classList.toggle("problem", !!bad); }
    function got(n) {
      bar.max = Math.max(file.size, 1); bar.value = n;
      count.textContent = megabytes(n) + " of " + megabytes(file.size) + " (" + Math.floor(100 * n / Math.max(file.size, 1)) + "%)";
    }
    function ended(text) {
      send.disabled = false; input.disabled = false; stop.hidden = true;
      say(text, true);
    }
    function again(why) {
      if (stopped) return;
      if (++tries >= UPLOAD_TRIES) {
        ended(why + " Choose the same file and Upload again to go on from where it stopped.");
        return;
      }
      var wait = Math.min(30, Math.pow(2, tries - 1));
      say(why + " Going on in " + wait + " s…");
      setTimeout(ask, wait * 1000);
    }
    function ask() {
      if (stopped) return;
      var query = "?file=" + encodeURIComponent(file.name) + "&key=" + k.key + "&size=" + file.size;
      var request = new XMLHttpRequest();
      request.open("GET", "/model/upload" + query);
      request.onload = function () {
        var answer = {};
        try { answer = JSON.parse(request.responseText); } catch (err) { /* not the route's JSON */ }
        if (request.status === 200) { name = answer.file; put(answer.have); return; }
        if (answer.kind === "again") { again(answer.problem); return; }
        k.forget();
        ended(answer.problem || "The upload was refused (" + request.status + ").");
      };
      request.onerror = function () { again("The connection to Tabletalk was lost."); };
      request.send();
    }
    function put(have) {
      // A part that holds the whole file is sent its last byte again: a request carries one at least.
      var from = Math.min(have || 0, Math.max(file.size - 1, 0));
      xhr = new XMLHttpRequest();
      xhr.open("POST", "/model/upload?file=" + encodeURIComponent(name) + "&key=" + k.key);
      xhr.setRequestHeader("X-CSRFToken", token);
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      if (file.size) xhr.setRequestHeader("Content-Range", "bytes " + from + "-" + (file.size - 1) + "/" + file.size);
      xhr.upload.onprogress = function (p) { got(from + p.loaded); };
      say(from ? "Going on from " + megabytes(from) + "…" : "Uploading " + file.name + "…");
      xhr.onload = function () {
        var answer = {};
        try { answer = JSON.parse(xhr.responseText); } catch (err) { /* not the route's JSON */ }
        if (xhr.status === 200) {
          k.forget(); got(file.size); say("Uploaded " + answer.file + ".");
          window.location.assign(answer.go || "/model");
          return;
        }
        if (answer.kind === "again" || answer.kind === "behind") { again(answer.problem); return; }
        k.forget();
        ended(answer.problem || "The upload failed (" + xhr.status + ").");
      };
      xhr.onerror = function () { again("The connection to Tabletalk was lost at " + megabytes(+bar.value) + "."); };
      xhr.onabort = halted;
      xhr.send(file.slice(from));
    }
    function halted() {
      ended("Stopped at " + megabytes(+bar.value) + ". Choose the same file and Upload again to go on from there.");
    }
    stop.onclick = function () {
      stopped = true;
      if (xhr && xhr.readyState !== XMLHttpRequest.DONE) xhr.abort(); else halted();  // sending, or waiting to try again
    };
    send.disabled = true; input.disabled = true; stop.hidden = false; shown.hidden = false; stopped = false;
    got(0);
    say("Uploading " + file.name + "…");  // said again once the server answered where to start
    ask();
  });
})();
