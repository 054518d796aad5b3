// Small progressive enhancements; every page works without this file.
(function () {
  "use strict";

  // A live region may be replaced only while nobody is using it: no focus inside and no
  // half-typed text (a deny reason, say). Used in hx-trigger filters.
  window.takeoverIdle = function (id) {
    var region = document.getElementById(id);
    if (!region) return true;
    if (region.contains(document.activeElement)) return false;
    var fields = region.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value) return false;
    }
    return true;
  };

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
