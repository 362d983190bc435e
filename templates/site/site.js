// tabcontam results site: sortable tables. A click on a column header of a table marked
// `sortable` sorts its rows by that column (numbers high to low first, text A to Z; a second
// click reverses; rows without a value stay last). `#sort=<column>` or `#sort=<column>-asc`
// in the address sorts the page's first sortable table on load. Every page reads the same
// without this script; it loads nothing and writes no markup, only moves rows.
(function () {
  "use strict";
  var each = function (list, f) { Array.prototype.forEach.call(list, f); };

  function key(cell, numeric) {
    var raw = cell.getAttribute("data-value");
    if (raw === null) { raw = cell.textContent.trim(); }
    if (!numeric) { return raw.toLowerCase(); }
    var n = parseFloat(raw);
    return isNaN(n) ? null : n;
  }

  function sort(table, column, descending) {
    var head = table.tHead.rows[0].cells[column];
    var numeric = head.getAttribute("data-type") === "number";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column], numeric), y = key(b.cells[column], numeric);
      if (x === y) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      var order = x < y ? -1 : 1;
      return descending ? -order : order;
    });
    each(rows, function (row) { body.appendChild(row); });
    each(table.tHead.rows[0].cells, function (th) { th.removeAttribute("aria-sort"); });
    head.setAttribute("aria-sort", descending ? "descending" : "ascending");
    table.setAttribute("data-sorted", head.getAttribute("data-key") + (descending ? "-desc" : "-asc"));
  }

  function firstDescending(th) {
    var first = th.getAttribute("data-first");
    if (first) { return first === "desc"; }
    return th.getAttribute("data-type") === "number";
  }

  function setUp(table) {
    each(table.tHead.rows[0].cells, function (th, column) {
      if (!th.hasAttribute("data-key")) { return; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (th.firstChild) { button.appendChild(th.firstChild); }
      th.appendChild(button);
      button.addEventListener("click", function () {
        var current = th.getAttribute("aria-sort");
        sort(table, column, current ? current === "ascending" : firstDescending(th));
      });
    });
  }

  function fromAddress(table) {
    var match = /^#sort=([a-z0-9-]+?)(?:-(asc|desc))?$/.exec(window.location.hash);
    if (!match || !table) { return; }
    each(table.tHead.rows[0].cells, function (th, column) {
      if (th.getAttribute("data-key") === match[1]) {
        sort(table, column, match[2] ? match[2] === "desc" : firstDescending(th));
      }
    });
  }

  var tables = document.querySelectorAll("table.sortable");
  each(tables, setUp);
  fromAddress(tables[0]);
})();
