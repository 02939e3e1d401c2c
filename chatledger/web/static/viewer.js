// chatledger viewer: the live timeline. While the newest page of a session is open,
// ask the server every few seconds for events after the newest one shown and append
// them. Rows arrive rendered (and escaped) by the server's templates; counters are
// set as text. Nothing else on the pages needs script.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live-url]");
  if (!table) { return; }
  var body = table.querySelector("tbody");
  var url = table.getAttribute("data-live-url");
  var after = Number(table.getAttribute("data-after"));
  var interval = Number(table.getAttribute("data-interval")) || 1000;
  var status = document.querySelector("[data-live-status]");

  function setCounters(counters) {
    Object.keys(counters).forEach(function (name) {
      document.querySelectorAll('[data-counter="' + name + '"]').forEach(function (cell) {
        cell.textContent = counters[name];
      });
    });
  }

  function poll() {
    fetch(url + "?after=" + after, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (data) {
        if (data.html) {
          body.insertAdjacentHTML("beforeend", data.html);
          body.querySelectorAll("tr.ev-row").forEach(function (row) {
            if (Number(row.getAttribute("data-version")) > after) { row.classList.add("new"); }
          });
        }
        after = data.after;
        table.setAttribute("data-after", String(after));
        setCounters(data.counters || {});
        if (status) { status.classList.remove("paused"); status.textContent = "\u25CF live"; }
        setTimeout(poll, data.more ? 0 : interval);
      })
      .catch(function () {
        if (status) { status.classList.add("paused"); status.textContent = "\u25CB reconnecting"; }
        setTimeout(poll, interval * 3);
      });
  }
  setTimeout(poll, interval);
})();
