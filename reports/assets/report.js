// Sorting for every table.sortable, filtering for the instance table. No dependencies.
(function () {
  "use strict";

  function cellKey(row, index, type) {
    var cell = row.cells[index];
    if (!cell) { return null; }
    var raw = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim();
    if (type === "num") {
      if (raw === "") { return null; }
      var n = Number(raw);
      return isNaN(n) ? null : n;
    }
    return raw.toLowerCase();
  }

  function makeSortable(table) {
    var body = table.tBodies[0];
    var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);
    headers.forEach(function (th, index) {
      var type = th.getAttribute("data-type");
      if (!type) { return; }
      th.tabIndex = 0;
      th.setAttribute("aria-sort", "none");
      function sort() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        var rows = Array.prototype.slice.call(body.rows);
        var keyed = rows.map(function (row, pos) {
          return { row: row, key: cellKey(row, index, type), pos: pos };
        });
        keyed.sort(function (a, b) {
          if (a.key === b.key) { return a.pos - b.pos; }
          if (a.key === null) { return 1; }   // blanks last in both directions
          if (b.key === null) { return -1; }
          return (a.key < b.key ? -1 : 1) * dir;
        });
        keyed.forEach(function (k) { body.appendChild(k.row); });
        headers.forEach(function (other) {
          if (other.hasAttribute("data-type")) { other.setAttribute("aria-sort", "none"); }
        });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(); }
      });
    });
  }

  function makeFilterable(table) {
    var text = document.getElementById("filter-text");
    var status = document.getElementById("filter-status");
    var shown = document.getElementById("shown-count");
    if (!text || !status || !shown) { return; }
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    function apply() {
      var query = text.value.trim().toLowerCase();
      var wanted = status.value;
      var count = 0;
      rows.forEach(function (row) {
        var ok = (!wanted || row.getAttribute("data-status") === wanted) &&
          (!query || row.textContent.toLowerCase().indexOf(query) !== -1);
        row.hidden = !ok;
        if (ok) { count += 1; }
      });
      shown.textContent = count + " of " + rows.length + " shown";
    }
    text.addEventListener("input", apply);
    status.addEventListener("change", apply);
    apply();
  }

  document.querySelectorAll("table.sortable").forEach(makeSortable);
  var instances = document.getElementById("instances-table");
  if (instances) { makeFilterable(instances); }
})();
