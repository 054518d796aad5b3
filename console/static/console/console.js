// Small progressive enhancements; every page works without this file.
//
// Never lose typing:
// - A form with `data-draft="KEY"` keeps its typed text in sessionStorage (this tab only), and
//   gets it back when the page is shown again (a reload, a navigation after "take over").
// - A live region marked `data-guard` is not replaced while a form inside it has been touched;
//   a notice says what changed, and the operator chooses (take over / show / discard).
// - A live list marked `data-keep-rows` keeps updating; only the rows being typed in (or
//   holding the focus) are left as they are.
(function () {
  "use strict";

  var DRAFT = "takeover-draft:";
  document.documentElement.classList.add("js");

  function textFields(root) {
    return root.querySelectorAll("textarea, input[type=text], input[type=search], input:not([type])");
  }

  // Touched: typed text, or a box ticked, that the server did not put there.
  function isTouched(root) {
    var fields = root.querySelectorAll("textarea, input");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.type !== "hidden" && f.type !== "submit" && f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function busy(root) {
    return isTouched(root) || root.contains(document.activeElement) && document.activeElement !== document.body;
  }

  // --- drafts ---------------------------------------------------------------------------
  function draftKey(form, field) {
    return DRAFT + form.getAttribute("data-draft") + ":" + (field.name || field.id);
  }

  function restoreDrafts(root) {
    var forms = (root.matches && root.matches("form[data-draft]")) ? [root] : root.querySelectorAll("form[data-draft]");
    for (var i = 0; i < forms.length; i++) {
      var fields = textFields(forms[i]);
      for (var j = 0; j < fields.length; j++) {
        var saved = sessionStorage.getItem(draftKey(forms[i], fields[j]));
        if (saved && !fields[j].value) fields[j].value = saved;
      }
    }
  }

  function clearDrafts(root) {
    var forms = root.querySelectorAll("form[data-draft]");
    for (var i = 0; i < forms.length; i++) {
      var fields = textFields(forms[i]);
      for (var j = 0; j < fields.length; j++) sessionStorage.removeItem(draftKey(forms[i], fields[j]));
    }
  }

  document.addEventListener("input", function (event) {
    var field = event.target;
    var form = field.form;
    if (!form || !form.hasAttribute("data-draft") || field.type === "hidden") return;
    if (field.value) sessionStorage.setItem(draftKey(form, field), field.value);
    else sessionStorage.removeItem(draftKey(form, field));
  });

  document.addEventListener("DOMContentLoaded", function () { restoreDrafts(document); });
  document.addEventListener("htmx:load", function (event) { restoreDrafts(event.target); });

  // --- relative ages ------------------------------------------------------------------------
  function ageText(iso) {
    var seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (isNaN(seconds)) return "";
    if (seconds < 60) return seconds + " s ago";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min ago";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min ago";
  }

  // Ages tick on their own ("5 s" does not still read "5 s" 26 s later), in the format the
  // server renders: 42 s, 12 min, 3 h 5 min, 2 d 4 h.
  function compactAge(iso) {
    var seconds = Math.max(0, Math.floor((Date.now() - Date.parse(iso)) / 1000));
    if (seconds < 60) return seconds + " s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return minutes ? hours + " h " + minutes + " min" : hours + " h";
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h" : days + " d";
  }

  function tick() {
    var ages = document.querySelectorAll("[data-age-from]");
    for (var i = 0; i < ages.length; i++) {
      var iso = ages[i].getAttribute("data-age-from");
      if (!isNaN(Date.parse(iso))) ages[i].textContent = compactAge(iso);
    }
    var warnings = document.querySelectorAll("[data-stale-after]");
    for (var j = 0; j < warnings.length; j++) {
      var from = Date.parse(warnings[j].getAttribute("data-stale-from"));
      var limit = parseFloat(warnings[j].getAttribute("data-stale-after")) * 1000;
      warnings[j].hidden = !(Date.now() - from > limit);
    }
  }
  setInterval(tick, 1000);

  // The tab title leads with what waits for this operator: "(3) Queue · Takeover".
  function syncTitle() {
    var baseTitle = document.title.replace(/^\(\d+\) /, "");
    var counts = document.querySelectorAll(".nav-count[data-title-count]");
    var total = 0;
    for (var i = 0; i < counts.length; i++) total += parseInt(counts[i].getAttribute("data-title-count"), 10) || 0;
    document.title = (total ? "(" + total + ") " : "") + baseTitle;
  }
  document.addEventListener("htmx:afterSettle", syncTitle);
  document.addEventListener("htmx:oobAfterSwap", syncTitle);

  // The resolve form says which read it was decided on: the one the diff shows now.
  function syncRead() {
    var diff = document.getElementById("diff");
    var field = document.querySelector('#resolve-form input[name="based_on_read"]');
    if (diff && field) field.value = diff.getAttribute("data-read") || "";
  }
  document.addEventListener("htmx:load", syncRead);
  // The background re-read on opening landed: show it (and decide on it) at once, not at the
  // next poll, so a quick resolve is not refused for a read the operator never saw.
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt.hasAttribute && event.detail.elt.hasAttribute("data-reread")) {
      htmx.trigger(document.body, "reread");
    }
  });
  document.addEventListener("htmx:afterSettle", syncRead);

  // --- guarded regions: a touched form is never replaced --------------------------------
  var stashed = {};  // region id → the element the server sent, not swapped in yet

  function button(label, className, onClick) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "btn btn-small " + className;
    b.textContent = label;
    b.addEventListener("click", onClick);
    return b;
  }

  function swapIn(id, keepText) {
    var current = document.getElementById(id);
    var next = stashed[id];
    delete stashed[id];
    if (!current || !next) return;
    var typed = {};
    if (keepText) {
      var fields = textFields(current);
      for (var i = 0; i < fields.length; i++) if (fields[i].name) typed[fields[i].name] = fields[i].value;
    } else {
      clearDrafts(current);
    }
    current.replaceWith(next);
    htmx.process(next);
    var landed = null;
    Object.keys(typed).forEach(function (name) {
      var field = next.querySelector('[name="' + name + '"]:not([type=hidden])');
      if (field && typed[name]) { field.value = typed[name]; landed = landed || field; }
    });
    var notice = document.getElementById("controls-notice");
    if (notice) notice.textContent = "";
    if (landed) landed.focus();
  }

  function showNotice(id, next) {
    var notice = document.getElementById("controls-notice");
    if (!notice) return;
    var when = next.getAttribute("data-guard-at");
    notice.textContent = "";
    var box = document.createElement("div");
    box.className = "notice notice-warn";
    var p = document.createElement("p");
    var strong = document.createElement("strong");
    strong.textContent = next.getAttribute("data-guard") + (when ? " " + ageText(when) : "") + ".";
    p.appendChild(strong);
    p.appendChild(document.createTextNode(" Your text below is kept as you left it."));
    box.appendChild(p);
    var btns = document.createElement("div");
    btns.className = "btns";
    var takeOver = next.querySelector("input[data-take-over]");
    if (takeOver) {
      // The server's own take-over form: the claim moves, the page reloads, the draft returns.
      var form = takeOver.form.cloneNode(true);
      form.classList.add("inline-form");
      btns.appendChild(form);
    }
    btns.appendChild(button("Show the new options, keep my text", "", function () { swapIn(id, true); }));
    btns.appendChild(button("Discard my text", "btn-quiet", function () { swapIn(id, false); }));
    box.appendChild(btns);
    notice.appendChild(box);
    htmx.process(notice);
  }

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !target.id) return;
    if (target.hasAttribute("data-guard") && isTouched(target)) {
      var next = event.detail.fragment.firstElementChild;
      if (!next) return;
      event.detail.shouldSwap = false;
      stashed[target.id] = next;
      showNotice(target.id, next);
      return;
    }
    if (target.hasAttribute("data-keep-rows")) keepBusyRows(target, event.detail.fragment);
  });

  // A live list: rows being typed in, or holding the focus, stay exactly as they are (htmx's
  // hx-preserve moves the live element into the new list); every other row updates.
  function keepBusyRows(target, fragment) {
    var rows = target.querySelectorAll("[data-row]");
    var focused = document.activeElement;
    var selection = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
    var kept = [];
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      if (!busy(row)) continue;
      var twin = fragment.querySelector("#" + CSS.escape(row.id));
      if (!twin) {
        // Decided elsewhere or expired while being typed in: keep it, say so.
        var body = fragment.querySelector("[data-rows]");
        if (!body) continue;
        twin = row.cloneNode(false);
        body.appendChild(twin);
        var empty = body.querySelector(".empty");
        if (empty) empty.remove();
        row.setAttribute("data-gone", "");
      }
      twin.setAttribute("hx-preserve", "true");
      kept.push(row);
    }
    if (!kept.length) return;
    setTimeout(function () {
      kept.forEach(function (row) {
        if (row.hasAttribute("data-gone") && !row.querySelector(".gone-note")) {
          var note = document.createElement("p");
          note.className = "gone-note error";
          note.setAttribute("role", "status");
          note.textContent = "No longer pending: decided by someone else or expired. Your text is kept.";
          (row.querySelector("td:last-child") || row).appendChild(note);
        }
      });
      if (focused && kept.some(function (r) { return r.contains(focused); }) && document.activeElement !== focused) {
        focused.focus();
        if (selection) { try { focused.setSelectionRange(selection[0], selection[1]); } catch (e) { /* not a text field */ } }
      }
    }, 0);
  }

  // --- bulk: ticks survive the live refresh ---------------------------------------------------
  // The rows' checkboxes belong to the bulk form (form="bulk-form"), but live inside the
  // refreshed region: what is ticked is remembered here and put back after each swap.
  var picked = {};
  function pickBoxes() { return document.querySelectorAll('input[type=checkbox][form="bulk-form"]'); }
  function syncPicks() {
    var boxes = pickBoxes();
    var count = 0;
    for (var i = 0; i < boxes.length; i++) {
      if (picked[boxes[i].value]) boxes[i].checked = true;
      if (boxes[i].checked) count++;
    }
    var label = document.getElementById("bulk-count");
    if (label && boxes.length) label.textContent = count ? count + " selected" : "Nothing selected yet.";
  }
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box.type !== "checkbox" || box.getAttribute("form") !== "bulk-form") return;
    if (box.checked) picked[box.value] = true; else delete picked[box.value];
    syncPicks();
  });
  document.addEventListener("htmx:afterSettle", syncPicks);

  // --- keyboard shortcuts: j/k move, o opens, r re-checks, ? lists them -------------------
  function typingIn(target) {
    // An open dialog keeps its keys; a dialog that was just closed (Escape) may still hold
    // the focus for a moment, and a shortcut pressed then must still work.
    return target.closest && target.closest("input, textarea, select, [contenteditable], dialog[open]");
  }

  function rowLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-shortcut-row]"));
  }

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typingIn(event.target)) return;
    var key = event.key;
    if (key === "?") {
      var help = document.getElementById("shortcuts");
      if (help && help.showModal && !help.open) { help.showModal(); event.preventDefault(); }
      return;
    }
    if (key === "j" || key === "k") {
      var links = rowLinks();
      if (!links.length) return;
      var at = links.indexOf(document.activeElement);
      var next = key === "j" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
      if (at === -1) next = 0;
      links[next].focus();
      links[next].closest("tr").scrollIntoView({block: "nearest"});
      event.preventDefault();
    } else if (key === "o") {
      var focused = document.activeElement;
      var target = rowLinks().indexOf(focused) >= 0 ? focused : rowLinks()[0];
      if (target) { target.click(); event.preventDefault(); }
    } else if (key === "r") {
      var recheck = document.querySelector("[data-shortcut-recheck]");
      if (recheck) { recheck.click(); event.preventDefault(); }
    } else if (key === "n") {
      var nextItem = document.getElementById("next-item");
      if (nextItem) { nextItem.click(); event.preventDefault(); }
    }
  });

  // --- errors --------------------------------------------------------------------------------
  // A refused or failed HTMX request swaps nothing; say so instead of doing nothing.
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    if (!xhr || event.detail.elt.classList.contains("poller")) return;
    var text = {403: "Not allowed for your role.", 404: "Not found (or not in your tenant)."};
    var message = (text[xhr.status] || "That did not work.") + " (HTTP " + xhr.status + ") ";
    var main = document.getElementById("main");
    var flash = document.getElementById("flash");
    if (!flash) {
      flash = document.createElement("div");
      flash.id = "flash";
      flash.className = "flash";
      main.insertBefore(flash, main.firstChild);
    }
    var item = document.createElement("p");
    item.className = "flash-item flash-error";
    item.setAttribute("role", "alert");
    item.textContent = message + "Reload the page to see the current state.";
    flash.appendChild(item);
  });
})();
