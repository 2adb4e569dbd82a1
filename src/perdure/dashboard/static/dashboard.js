// perdure dashboard: the only script. The pages are complete without it; it
// adds (1) live refresh: the element #live is re-fetched every few seconds
// (the server answers the header X-Perdure-Fragment with that part only), and
// (2) confirmations: a form with data-confirm asks before it is sent.
(function () {
  "use strict";

  // A textarea marked data-json must hold JSON (or nothing): checked before
  // the form is sent; the server checks again.
  function jsonProblem(area) {
    var text = area.value.trim();
    if (!text) return "";
    try {
      JSON.parse(text);
      return "";
    } catch (error) {
      return "not valid JSON: " + error.message;
    }
  }

  document.addEventListener("input", function (event) {
    var area = event.target;
    if (area.hasAttribute && area.hasAttribute("data-json")) {
      var problem = jsonProblem(area);
      area.setCustomValidity(problem);
      var note = area.form && area.form.querySelector(".json-problem");
      if (note) {
        note.textContent = problem;
        note.hidden = !problem;
      }
    }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var areas = form.querySelectorAll ? form.querySelectorAll("textarea[data-json]") : [];
    for (var i = 0; i < areas.length; i++) {
      var problem = jsonProblem(areas[i]);
      if (problem) {
        areas[i].setCustomValidity(problem);
        var note = form.querySelector(".json-problem");
        if (note) {
          note.textContent = problem;
          note.hidden = false;
        }
        event.preventDefault();
        return;
      }
    }
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  var live = document.getElementById("live");
  var toggle = document.querySelector("[data-live-toggle]");
  var seconds = live ? Number(live.getAttribute("data-refresh")) || 0 : 0;
  if (!live || seconds <= 0) {
    return;
  }
  var KEY = "perdure.live";
  var enabled = window.localStorage.getItem(KEY) !== "off";
  var busy = false;

  function show() {
    if (!toggle) return;
    toggle.hidden = false;
    toggle.className = "live-toggle " + (enabled ? "on" : "off");
    toggle.textContent = enabled ? "live" : "paused";
    toggle.title = enabled ? "Live refresh is on: click to pause" : "Live refresh is paused: click to resume";
  }

  // Someone typing in a form, or an open action popover, keeps the page still.
  function interacting() {
    var active = document.activeElement;
    if (active && live.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    return live.querySelector("details[open]") !== null;
  }

  function refresh() {
    if (!enabled || seconds <= 0 || busy || document.hidden || interacting()) return;
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Perdure-Fragment": "1" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      if (response.headers.get("X-Perdure-Live") === "0") seconds = 0;
      if (!response.ok) return null;
      return response.text();
    }).then(function (html) {
      if (html !== null && !interacting()) {
        live.innerHTML = html;
        document.dispatchEvent(new CustomEvent("perdure:refreshed"));
      }
    }).catch(function () {
      // The server is restarting or the network blinked: try again next tick.
    }).then(function () {
      busy = false;
    });
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      enabled = !enabled;
      window.localStorage.setItem(KEY, enabled ? "on" : "off");
      show();
      if (enabled) refresh();
    });
  }
  show();
  window.setInterval(refresh, seconds * 1000);
})();
