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
})();
