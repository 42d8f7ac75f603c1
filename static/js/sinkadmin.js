// sinkadmin UI behaviour. htmx does the requests; this file keeps the small
// pieces of page state that must survive an htmx swap.
(function () {
  "use strict";

  // --- live refresh -----------------------------------------------------------
  // Polling elements carry hx-trigger="every Ns [sinkadminLive()]".
  var LIVE_KEY = "sinkadmin.live";
  var live = window.localStorage ? window.localStorage.getItem(LIVE_KEY) !== "off" : true;
  window.sinkadminLive = function () { return live && !document.hidden; };

  function showLiveState() {
    document.querySelectorAll("[data-live-toggle]").forEach(function (button) {
      button.setAttribute("aria-pressed", live ? "false" : "true");
      button.textContent = live ? "Pause live refresh" : "Resume live refresh";
    });
    document.querySelectorAll(".live-bar").forEach(function (bar) {
      bar.setAttribute("data-paused", live ? "false" : "true");
      var state = bar.querySelector("[data-live-state]");
      if (state) { state.textContent = live ? "Live" : "Paused"; }
    });
  }

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-live-toggle]");
    if (toggle) {
      live = !live;
      if (window.localStorage) { window.localStorage.setItem(LIVE_KEY, live ? "on" : "off"); }
      showLiveState();
    }
  });

  // --- keep open <details> (error traces) open across refreshes -----------------
  var openDetails = [];
  document.addEventListener("htmx:beforeSwap", function (event) {
    openDetails = Array.prototype.map.call(
      event.detail.target.querySelectorAll("details[id][open]"), function (d) { return d.id; });
  });
  document.addEventListener("htmx:afterSwap", function () {
    openDetails.forEach(function (id) {
      var details = document.getElementById(id);
      if (details) { details.open = true; }
    });
  });

  // --- field errors: mark the input invalid when its error list is not empty -------
  function markInvalid(root) {
    (root || document).querySelectorAll("[data-errors-for]").forEach(function (box) {
      var input = document.getElementById(box.getAttribute("data-errors-for"));
      if (!input) { return; }
      var bad = box.querySelector("li") !== null;
      if (bad) { input.setAttribute("aria-invalid", "true"); } else { input.removeAttribute("aria-invalid"); }
      // An error in a folded group must not stay hidden.
      if (bad) {
        var details = input.closest("details");
        while (details) { details.open = true; details = details.parentElement.closest("details"); }
      }
    });
  }
  document.addEventListener("htmx:afterSettle", function () { markInvalid(document); });

  // --- key/value editor -------------------------------------------------------------
  function revalidate(form) {
    if (form) { form.dispatchEvent(new Event("input", { bubbles: true })); }
  }
  document.addEventListener("click", function (event) {
    var add = event.target.closest("[data-kv-add]");
    if (add) {
      var template = document.getElementById("kv-row-template");
      var body = document.getElementById("kv-rows");
      body.appendChild(template.content.cloneNode(true));
      var rows = body.querySelectorAll("tr");
      var input = rows[rows.length - 1].querySelector("input");
      if (input) { input.focus(); }
      return;
    }
    var remove = event.target.closest("[data-kv-remove]");
    if (remove) {
      var form = remove.closest("form");
      remove.closest("tr").remove();
      revalidate(form);
    }
  });

  // --- JSON / properties: import a file into the text, export the text as a file ---------
  document.addEventListener("change", function (event) {
    var input = event.target.closest("[data-import-into]");
    if (!input || !input.files || !input.files.length) { return; }
    var target = document.getElementById(input.getAttribute("data-import-into"));
    var reader = new FileReader();
    reader.onload = function () {
      target.value = String(reader.result);
      revalidate(target.form);
    };
    reader.readAsText(input.files[0]);
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-export-from]");
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-export-from"));
    var format = source.value.trim().charAt(0) === "{" ? "json" : "properties";
    var blob = new Blob([source.value], { type: format === "json" ? "application/json" : "text/plain" });
    var link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = (button.getAttribute("data-filename") || "connector") + "." + format;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(function () { URL.revokeObjectURL(link.href); }, 1000);
  });

  // --- charts on the commit history page --------------------------------------------
  function drawCharts() {
    var data = document.getElementById("chart-data");
    if (!data || typeof window.Chart === "undefined") { return; }
    var series = JSON.parse(data.textContent);
    var common = {
      responsive: true, maintainAspectRatio: false, animation: false,
      plugins: { legend: { display: false } },
      scales: { x: { ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 6 } }, y: { beginAtZero: true } },
    };
    function chart(id, values, kind, color, unit) {
      var canvas = document.getElementById(id);
      if (!canvas) { return; }
      var options = JSON.parse(JSON.stringify(common));
      options.plugins.tooltip = { callbacks: {
        title: function (items) { return "commit " + series.commit_ids[items[0].dataIndex].slice(0, 8) + " · " + items[0].label; },
        label: function (item) { return item.formattedValue + " " + unit; },
      } };
      new window.Chart(canvas, {
        type: kind,
        data: { labels: series.labels, datasets: [{ data: values, backgroundColor: color, borderColor: color, pointRadius: 2, spanGaps: true }] },
        options: options,
      });
    }
    chart("chart-records", series.records, "bar", "#79aec8", "records");
    chart("chart-duration", series.duration_s, "line", "#417690", "s");
    chart("chart-lag", series.lag_s, "line", "#b34700", "s");
  }

  document.addEventListener("DOMContentLoaded", function () {
    showLiveState();
    markInvalid(document);
    drawCharts();
  });
})();
