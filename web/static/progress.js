// Live progress, the one script of the dashboard: every element with
// data-job on a page showing a running or queued job polls /api/jobs/ID
// and updates its stage and progress bar; when the job's state changes the
// page reloads, so that the server-rendered page shows the result. Without
// JavaScript the page is complete as served.
"use strict";
(function () {
  const els = Array.from(document.querySelectorAll("[data-job]"));
  if (!els.length) return;
  const started = Date.now();
  function fmt(ns) {
    const s = Math.round(ns / 1e9);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.round(s / 60) + " min";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }
  async function poll(el) {
    const id = el.dataset.job;
    try {
      const resp = await fetch("/api/jobs/" + encodeURIComponent(id), { headers: { Accept: "application/json" } });
      if (!resp.ok) return;
      const job = await resp.json();
      if (job.state !== el.dataset.state) { location.reload(); return; }
      const stage = el.querySelector(".stage");
      if (stage && job.stage) stage.textContent = job.stage;
      const p = job.progress;
      if (p && p.total > 0) {
        let bar = el.querySelector("progress");
        if (!bar) {
          bar = document.createElement("progress");
          el.appendChild(document.createTextNode(" "));
          el.appendChild(bar);
        }
        bar.max = p.total; bar.value = p.done; bar.textContent = p.done + "/" + p.total;
        let count = el.querySelector(".count");
        if (!count) { count = document.createElement("span"); count.className = "count"; el.appendChild(count); }
        count.textContent = " " + p.done + "/" + p.total;
      }
      if (p && p.eta_ns > 0) {
        let eta = el.querySelector(".eta");
        if (!eta) { eta = document.createElement("span"); eta.className = "eta"; el.appendChild(eta); }
        eta.textContent = " about " + fmt(p.eta_ns) + " left";
      }
    } catch (e) { /* the next poll tries again */ }
  }
  function tick() {
    if (Date.now() - started > 6 * 3600e3) return; // a forgotten tab stops asking
    els.forEach(poll);
    setTimeout(tick, 3000);
  }
  setTimeout(tick, 3000);
})();
