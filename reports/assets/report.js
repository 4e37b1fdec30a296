// Sorting for every table.sortable; paging and filtering for the instance tables, which are
// rendered a page at a time from their embedded JSON (table.paged). No dependencies.
(function () {
  "use strict";

  // Blanks (null) last in both directions; ties keep their original order.
  function byKey(dir) {
    return function (a, b) {
      if (a.key === b.key) { return a.pos - b.pos; }
      if (a.key === null) { return 1; }
      if (b.key === null) { return -1; }
      return (a.key < b.key ? -1 : 1) * dir;
    };
  }

  function toggle(headers, th) {
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    headers.forEach(function (other) {
      if (other.hasAttribute("data-type")) { other.setAttribute("aria-sort", "none"); }
    });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    return dir;
  }

  function onHeaders(table, handler) {
    var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);
    headers.forEach(function (th, index) {
      var type = th.getAttribute("data-type");
      if (!type) { return; }
      th.tabIndex = 0;
      th.setAttribute("aria-sort", "none");
      function sort() { handler(index, type, toggle(headers, th)); }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(); }
      });
    });
  }

  // Small static tables (the comparison): sort the rows in the DOM.
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
    onHeaders(table, function (index, type, dir) {
      var keyed = Array.prototype.slice.call(body.rows).map(function (row, pos) {
        return { row: row, key: cellKey(row, index, type), pos: pos };
      });
      keyed.sort(byKey(dir));
      keyed.forEach(function (k) { body.appendChild(k.row); });
    });
  }

  // Paged tables: rows are arrays, columns say where each cell's text and sort key are.
  function cell(row, column, colors) {
    var td = document.createElement("td");
    var text = row[column.text];
    if (column.kind === "num") {
      var v = row[column.value];
      td.className = "num";
      td.setAttribute("data-v", v === null ? "" : String(v));
      td.textContent = text;
    } else if (column.kind === "status") {
      var badge = document.createElement("span");
      td.setAttribute("data-v", row[column.value]);
      badge.className = "status";
      badge.style.background = colors[text] || "";
      badge.textContent = text;
      td.appendChild(badge);
    } else if (column.kind === "files") {
      td.className = "files";
      var files = [];
      text.forEach(function (link) {
        if (link[0] === "folder" || link[0] === "steps") {
          td.appendChild(anchor(link));
          td.appendChild(document.createTextNode(" "));
        } else { files.push(link); }
      });
      if (files.length) {
        var details = document.createElement("details");
        var summary = document.createElement("summary");
        summary.textContent = files.length + " files";
        details.appendChild(summary);
        files.forEach(function (link) { details.appendChild(anchor(link)); });
        td.appendChild(details);
      }
    } else {
      td.textContent = text;
    }
    return td;
  }

  function anchor(link) {
    var a = document.createElement("a");
    a.setAttribute("href", link[1]);
    a.textContent = link[0];
    return a;
  }

  function haystack(row, columns) {
    return columns.map(function (c) {
      var t = row[c.text];
      return c.kind === "files" ? t.map(function (l) { return l[0]; }).join(" ") : String(t);
    }).join(" ").toLowerCase();
  }

  function makePaged(table) {
    var source = document.getElementById(table.id + "-data");
    var pager = document.getElementById(table.id + "-pager");
    if (!source || !pager) { return null; }
    var data = JSON.parse(source.textContent);
    var columns = data.columns;
    var size = data.pageSize;
    var body = table.tBodies[0];
    var info = pager.querySelector(".page-info");
    var buttons = pager.querySelectorAll("button");
    var items = data.rows.map(function (row, pos) { return { row: row, pos: pos, hay: null }; });
    var order = items.slice();
    var view = order;
    var page = 0;
    var state = { query: "", status: "", listener: null };

    function pages() { return Math.max(1, Math.ceil(view.length / size)); }

    function render() {
      var fragment = document.createDocumentFragment();
      view.slice(page * size, (page + 1) * size).forEach(function (item) {
        var tr = document.createElement("tr");
        tr.setAttribute("data-status", item.row[1]);
        tr.setAttribute("data-key", item.row[0]);
        columns.forEach(function (c) { tr.appendChild(cell(item.row, c, data.colors)); });
        fragment.appendChild(tr);
      });
      body.textContent = "";
      body.appendChild(fragment);
      info.textContent = "page " + (page + 1) + " of " + pages();
      table.setAttribute("data-page", String(page + 1));  // rendered by script
      buttons[0].disabled = page === 0;
      buttons[1].disabled = page + 1 >= pages();
      pager.hidden = items.length <= size;
      if (state.listener) { state.listener(view.length, items.length); }
    }

    function filter() {
      view = order.filter(function (item) {
        if (state.status && item.row[1] !== state.status) { return false; }
        if (!state.query) { return true; }
        if (item.hay === null) { item.hay = haystack(item.row, columns); }
        return item.hay.indexOf(state.query) !== -1;
      });
      page = 0;
      render();
    }

    Array.prototype.forEach.call(buttons, function (button) {
      button.addEventListener("click", function () {
        var next = page + Number(button.getAttribute("data-step"));
        if (next >= 0 && next < pages()) { page = next; render(); }
      });
    });

    onHeaders(table, function (index, type, dir) {
      var column = columns[index];
      var keyed = items.map(function (item) {
        var v = column.value === null ? item.row[column.text] : item.row[column.value];
        var key = type === "num" ? (v === null || v === "" ? null : Number(v))
          : String(v).toLowerCase();
        return { item: item, key: key, pos: item.pos };
      });
      keyed.sort(byKey(dir));
      order = keyed.map(function (k) { return k.item; });
      filter();
    });

    render();
    return {
      setFilter: function (query, status) { state.query = query; state.status = status; filter(); },
      onCount: function (listener) { state.listener = listener; render(); }
    };
  }

  function makeFilterable(paged) {
    var text = document.getElementById("filter-text");
    var status = document.getElementById("filter-status");
    var shown = document.getElementById("shown-count");
    if (!text || !status || !shown) { return; }
    paged.onCount(function (count, total) { shown.textContent = count + " of " + total + " shown"; });
    function apply() { paged.setFilter(text.value.trim().toLowerCase(), status.value); }
    text.addEventListener("input", apply);
    status.addEventListener("change", apply);
    apply();
  }

  document.querySelectorAll("table.sortable:not(.paged)").forEach(makeSortable);
  document.querySelectorAll("table.paged").forEach(function (table) {
    var paged = makePaged(table);
    if (paged && table.id === "instances-table") { makeFilterable(paged); }
  });
})();
