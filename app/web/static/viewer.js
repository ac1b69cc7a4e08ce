// The log viewer's enhancements (viewer.html). The page works without them: search, next error,
// wrap, timestamps and folding are links and GET forms the server answers. Here they become
// instant where the page already has what is asked (a match further down this page, the wrap
// of these lines), the choices are remembered in this browser, keys are bound and a permalink
// to the selected lines is copied. Line selection itself (#L10-L20) is app.js's.
"use strict";
(function () {
  const STORE = "logtriage.viewer.";
  const PHONE = window.matchMedia("(max-width: 700px)");

  function remember(key, value) {
    try { window.localStorage.setItem(STORE + key, value); } catch (e) { /* private mode: not kept */ }
  }
  function recall(key) {
    try { return window.localStorage.getItem(STORE + key); } catch (e) { return null; }
  }

  function init() {
    const log = document.querySelector(".viewer-log");
    const status = document.getElementById("viewer-status");
    const params = new URLSearchParams(window.location.search);
    const say = (text) => {
      if (!status) return;
      let p = status.querySelector("[data-said]");
      if (!p) {
        p = document.createElement("p");
        p.setAttribute("data-said", "");
        status.appendChild(p);
      }
      p.textContent = text;
    };

    // --- wrap, timestamps, folds: toggled in place, the first two remembered ----------------------
    const wrapLink = document.querySelector("[data-toggle=wrap]");
    const tsLink = document.querySelector("[data-toggle=ts]");
    const foldLink = document.querySelector("[data-toggle=fold]");
    const wrapped = () => log && (log.dataset.wrap === "on" || (log.dataset.wrap === "auto" && PHONE.matches));
    const label = () => {
      if (wrapLink && log) wrapLink.textContent = wrapped() ? "Unwrap lines" : "Wrap lines";
      if (tsLink && log) tsLink.textContent = log.dataset.ts === "off" ? "Show timestamps" : "Hide timestamps";
      if (foldLink && log) {
        const folds = log.querySelectorAll("details.fold");
        const open = folds.length > 0 && Array.from(folds).every((d) => d.open);
        if (folds.length) foldLink.textContent = open ? "Fold repeats" : "Unfold repeats";
      }
    };
    if (log) {
      if (!params.has("wrap") && (recall("wrap") === "on" || recall("wrap") === "off")) log.dataset.wrap = recall("wrap");
      if (!params.has("ts") && recall("ts") === "off") log.dataset.ts = "off";
    }
    const toggleWrap = () => {
      if (!log) return;
      log.dataset.wrap = wrapped() ? "off" : "on";
      remember("wrap", log.dataset.wrap);
      label();
    };
    const toggleTs = () => {
      if (!log || !tsLink) return;
      log.dataset.ts = log.dataset.ts === "off" ? "on" : "off";
      remember("ts", log.dataset.ts);
      label();
    };
    const toggleFolds = () => {
      if (!log) return false;
      const folds = Array.from(log.querySelectorAll("details.fold"));
      if (!folds.length) return false;  // folding is off on this page: the link asks the server
      const open = !folds.every((d) => d.open);
      folds.forEach((d) => { d.open = open; });
      label();
      return true;
    };
    const click = (el, fn) => el && el.addEventListener("click", (ev) => {
      if (fn() !== false) ev.preventDefault();
    });
    click(wrapLink, toggleWrap);
    click(tsLink, toggleTs);
    click(foldLink, toggleFolds);
    PHONE.addEventListener("change", label);
    if (log) log.addEventListener("toggle", label, true);
    label();

    // --- a line inside a folded run is shown when linked to -----------------------------------------
    const selected = () => {
      const m = /^#L(\d+)(?:-L(\d+))?$/.exec(window.location.hash);
      if (!m) return null;
      const a = Number(m[1]), b = Number(m[2] || m[1]);
      return [Math.min(a, b), Math.max(a, b)];
    };
    const reveal = () => {
      const sel = selected();
      if (!sel || !log) return;
      log.querySelectorAll("details.fold").forEach((d) => {
        const rows = d.querySelectorAll("tr[data-line]");
        if (!rows.length) return;
        const first = Number(rows[0].dataset.line), last = Number(rows[rows.length - 1].dataset.line);
        if (first <= sel[1] && last >= sel[0]) d.open = true;
      });
      const row = document.getElementById("L" + sel[0]);
      if (row) row.scrollIntoView({ block: "center" });
    };
    window.addEventListener("hashchange", reveal);
    reveal();

    // --- "make a rule from these lines": the field follows the selected lines --------------------
    const ruleLines = document.getElementById("rule-lines");
    const pickLines = () => {
      const sel = selected();
      if (ruleLines && sel) ruleLines.value = sel[0] === sel[1] ? String(sel[0]) : sel[0] + "-" + sel[1];
    };
    window.addEventListener("hashchange", pickLines);
    // app.js selects lines with history.replaceState (no hashchange): read the hash after its
    // click handler ran, which a listener on the document does (it hears the click last)
    document.addEventListener("click", (ev) => {
      if (ev.target instanceof Element && ev.target.closest("a.ln-link")) pickLines();
    });
    pickLines();

    // --- permalink: the selected lines (or the line the page is about), copied --------------------
    const permalinkButton = document.getElementById("viewer-permalink");
    const permalink = () => {
      const sel = selected();
      const target = params.get("line");
      const [a, b] = sel || (target ? [Number(target), Number(target)] : [null, null]);
      const u = new URL(window.location.pathname, window.location.origin);
      if (a === null) {
        const first = log ? log.dataset.firstLine : null;
        if (first && first !== "1") { u.searchParams.set("line", first); u.hash = "L" + first; }
        return u.toString();
      }
      u.searchParams.set("line", String(a));
      u.hash = a === b ? "L" + a : "L" + a + "-L" + b;
      return u.toString();
    };
    const copyPermalink = () => {
      const link = permalink();
      if (selected() === null && params.get("line")) history.replaceState(null, "", "#L" + params.get("line"));
      const done = () => say("Permalink copied: " + link);
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(link).then(done, () => say("Permalink (copy it): " + link));
      } else {
        say("Permalink (copy it): " + link);
      }
    };
    if (permalinkButton) {
      permalinkButton.hidden = false;
      permalinkButton.addEventListener("click", copyPermalink);
    }

    // --- next/previous match or error: on this page at once, else the server's link ---------------
    const current = () => {
      const sel = selected();
      if (sel) return sel[0];
      const target = params.get("line");
      if (target) return Number(target);
      return log ? Number(log.dataset.firstLine) - 1 : 0;
    };
    const hop = (cls, forward, key) => {
      const here = current();
      if (log) {
        const rows = Array.from(log.querySelectorAll("tr." + cls));
        const lines = rows.map((r) => Number(r.dataset.line));
        const n = forward ? lines.find((x) => x > here) : lines.reverse().find((x) => x < here);
        if (n !== undefined) {
          window.location.hash = "#L" + n;
          return;
        }
      }
      const link = document.querySelector("a[data-key='" + key + "']");
      if (!link) return;
      const u = new URL(link.href);
      if (u.searchParams.has("from")) u.searchParams.set("from", String(here));
      window.location.assign(u.toString());
    };
    document.querySelectorAll("a[data-key]").forEach((a) => {
      const key = a.dataset.key;
      a.addEventListener("click", (ev) => {
        if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
        ev.preventDefault();
        if (key === "n" || key === "N") hop("match", key === "n", key);
        else hop("err", key === "e", key);
      });
    });

    // --- a long search goes on by itself (the page says how far it got), a few times -------------
    const on = document.querySelector("a[data-search-on]");
    const session = (fn) => { try { return fn(window.sessionStorage); } catch (e) { return null; } };
    const hops = Number(session((st) => st.getItem(STORE + "hops")) || "0");
    if (on && hops < 20) {
      session((st) => st.setItem(STORE + "hops", String(hops + 1)));
      say("Searching on…");
      window.location.replace(on.href);
    } else {
      session((st) => st.removeItem(STORE + "hops"));
    }

    // --- keys -----------------------------------------------------------------------------------------
    const help = document.getElementById("viewer-keys");
    if (help) help.hidden = false;
    const search = document.getElementById("viewer-q");
    document.addEventListener("keydown", (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) return;
      const t = ev.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) {
        if (ev.key === "Escape" && t === search) search.blur();
        return;
      }
      const page = (rel) => {
        const a = document.querySelector("a[rel=" + rel + "]");
        if (a) window.location.assign(a.href);
      };
      const actions = {
        "/": () => { if (search) { search.focus(); search.select(); } },
        n: () => hop("match", true, "n"),
        N: () => hop("match", false, "N"),
        e: () => hop("err", true, "e"),
        E: () => hop("err", false, "E"),
        w: toggleWrap,
        t: toggleTs,
        f: () => { if (!toggleFolds() && foldLink) window.location.assign(foldLink.href); },
        c: copyPermalink,
        j: () => page("next"),
        k: () => page("prev"),
        "?": () => { if (help) { help.open = !help.open; if (help.open) help.querySelector("summary").focus(); } },
      };
      const act = actions[ev.key];
      if (!act) return;
      if ((ev.key === "n" || ev.key === "N") && !document.querySelector("a[data-key=n]")) return;
      ev.preventDefault();
      act();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
