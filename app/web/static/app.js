// logtriage pages: progressive enhancement only. Every page works without this file; with it,
// uploads show progress, patches copy in one click, tabs switch, and the log viewer highlights
// line ranges. No framework, no build step, no inline script (the pages' CSP forbids it).
"use strict";

(function () {
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  // --- theme ---------------------------------------------------------------------------------
  function initTheme() {
    const btn = document.getElementById("theme-toggle");
    if (!btn) return;
    const root = document.documentElement;
    const current = () =>
      root.getAttribute("data-theme") ||
      (window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
    const label = () => btn.setAttribute("aria-pressed", current() === "dark" ? "true" : "false");
    label();
    btn.addEventListener("click", () => {
      const next = current() === "dark" ? "light" : "dark";
      root.setAttribute("data-theme", next);
      try { localStorage.setItem("lt-theme", next); } catch (e) { /* private mode */ }
      label();
    });
  }

  // --- copy to clipboard -----------------------------------------------------------------------
  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    // plain-http deployments: the async clipboard is only offered to secure contexts
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "visually-hidden";
    document.body.appendChild(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    if (!ok) throw new Error("copy refused");
  }

  function initCopy(scope) {
    scope.querySelectorAll("[data-copy-from]").forEach((btn) => {
      if (btn.dataset.bound) return;
      btn.dataset.bound = "1";
      const original = btn.textContent;
      btn.addEventListener("click", async () => {
        const src = document.getElementById(btn.dataset.copyFrom);
        if (!src) return;
        const text = "value" in src && src.tagName === "TEXTAREA" ? src.value : src.textContent;
        try {
          await copyText(text);
          btn.textContent = "Copied";
          btn.classList.add("copied");
        } catch (e) {
          btn.textContent = "Copy failed: select and copy by hand";
        }
        setTimeout(() => { btn.textContent = original; btn.classList.remove("copied"); }, 1800);
      });
    });
  }

  // --- tabs (WAI-ARIA tabs pattern: arrows move, Home/End jump) ---------------------------------
  function initTabs(scope) {
    scope.querySelectorAll("[data-tabs]").forEach((box) => {
      const tabs = Array.from(box.querySelectorAll('[role="tab"]'));
      const select = (tab, focus) => {
        tabs.forEach((t) => {
          const on = t === tab;
          t.setAttribute("aria-selected", on ? "true" : "false");
          t.tabIndex = on ? 0 : -1;
          const panel = document.getElementById(t.getAttribute("aria-controls"));
          if (panel) panel.hidden = !on;
        });
        if (focus) tab.focus();
      };
      tabs.forEach((t, i) => {
        t.addEventListener("click", () => select(t, false));
        t.addEventListener("keydown", (ev) => {
          let j = null;
          if (ev.key === "ArrowRight") j = (i + 1) % tabs.length;
          else if (ev.key === "ArrowLeft") j = (i - 1 + tabs.length) % tabs.length;
          else if (ev.key === "Home") j = 0;
          else if (ev.key === "End") j = tabs.length - 1;
          if (j !== null) { ev.preventDefault(); select(tabs[j], true); }
        });
      });
    });
  }

  // --- history filters: served open (without script every field shows); on a phone they fold
  // behind their summary, so that the first result is not a screen and a half down -----------------
  function foldFilters() {
    const more = document.getElementById("filter-more");
    if (more && window.matchMedia("(max-width: 600px)").matches) more.open = false;
  }
  document.addEventListener("DOMContentLoaded", foldFilters);

  // --- upload ------------------------------------------------------------------------------------
  function human(n) {
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  // Files of a dropped folder, recursively (Chrome/Firefox/Safari all offer webkitGetAsEntry).
  function readEntry(entry, prefix, out) {
    return new Promise((resolve) => {
      if (entry.isFile) {
        entry.file((f) => { out.push({ file: f, name: prefix + f.name }); resolve(); }, () => resolve());
      } else if (entry.isDirectory) {
        const reader = entry.createReader();
        const all = [];
        const batch = () => reader.readEntries((entries) => {
          if (!entries.length) {
            Promise.all(all.map((e) => readEntry(e, prefix + entry.name + "/", out))).then(resolve);
          } else { all.push(...entries); batch(); }
        }, () => resolve());
        batch();
      } else resolve();
    });
  }

  function initUpload() {
    const form = document.getElementById("upload-form");
    if (!form) return;
    const zone = document.getElementById("dropzone");
    const list = document.getElementById("file-list");
    const filesInput = document.getElementById("log-files");
    const folderInput = document.getElementById("log-folder");
    const paste = document.getElementById("paste");
    const errorBox = document.getElementById("upload-error");
    const progressBox = document.getElementById("upload-progress");
    const bar = document.getElementById("upload-bar");
    const status = document.getElementById("upload-status");
    const submit = document.getElementById("upload-submit");
    const maxBytes = Number(form.dataset.maxBytes || 0);
    let chosen = []; // {file, name}

    // the folder picker is only reachable through its label once scripts run
    folderInput.removeAttribute("tabindex");
    folderInput.removeAttribute("aria-hidden");

    const showError = (title, detail) => {
      errorBox.hidden = false;
      errorBox.textContent = "";
      const strong = document.createElement("strong");
      strong.textContent = title + ": ";
      errorBox.append(strong, document.createTextNode(detail));
      errorBox.focus && errorBox.setAttribute("tabindex", "-1");
      errorBox.focus();
    };
    const clearError = () => { errorBox.hidden = true; errorBox.textContent = ""; };

    const render = () => {
      list.textContent = "";
      chosen.forEach((c, i) => {
        const li = document.createElement("li");
        const name = document.createElement("span");
        name.textContent = c.name;
        const size = document.createElement("span");
        size.className = "size";
        size.textContent = human(c.file.size);
        const rm = document.createElement("button");
        rm.type = "button";
        rm.className = "small";
        rm.textContent = "Remove";
        rm.setAttribute("aria-label", "Remove " + c.name);
        rm.addEventListener("click", () => { chosen.splice(i, 1); render(); });
        li.append(name, size, rm);
        list.appendChild(li);
      });
    };
    const add = (items) => {
      for (const it of items) {
        if (!chosen.some((c) => c.name === it.name && c.file.size === it.file.size)) chosen.push(it);
      }
      clearError();
      render();
    };

    filesInput.addEventListener("change", () => {
      add(Array.from(filesInput.files).map((f) => ({ file: f, name: f.name })));
      filesInput.value = "";
    });
    folderInput.addEventListener("change", () => {
      add(Array.from(folderInput.files).map((f) => ({ file: f, name: f.webkitRelativePath || f.name })));
      folderInput.value = "";
    });
    ["dragenter", "dragover"].forEach((t) => zone.addEventListener(t, (ev) => {
      ev.preventDefault();
      zone.classList.add("dragover");
    }));
    ["dragleave", "drop"].forEach((t) => zone.addEventListener(t, () => zone.classList.remove("dragover")));
    zone.addEventListener("drop", async (ev) => {
      ev.preventDefault();
      const dt = ev.dataTransfer;
      const out = [];
      const entries = dt.items ? Array.from(dt.items).map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()) : [];
      if (entries.length && entries.every(Boolean)) {
        await Promise.all(entries.map((e) => readEntry(e, "", out)));
      } else {
        Array.from(dt.files).forEach((f) => out.push({ file: f, name: f.name }));
      }
      add(out);
    });

    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      clearError();
      const text = paste.value;
      if (!chosen.length && !text.trim()) {
        showError("Nothing to analyse", "choose log files or a folder, or paste a traceback");
        return;
      }
      const empty = chosen.find((c) => c.file.size === 0);
      if (empty) { showError("Empty file", empty.name + " is empty; remove it or choose another file"); return; }
      const total = chosen.reduce((n, c) => n + c.file.size, 0) + text.length;
      if (maxBytes && total > maxBytes) {
        showError("Too big", "the upload is " + human(total) + ", over this service's limit of " + human(maxBytes) +
          "; gzip the logs (they are accepted compressed) or send the last part");
        return;
      }
      const data = new FormData();
      chosen.forEach((c) => data.append("log", c.file, c.name.replace(/\//g, "__")));
      if (text.trim()) data.append("log", new Blob([text], { type: "text/plain" }), "pasted.log");
      const config = document.getElementById("config");
      if (config.files.length) data.append("config", config.files[0], config.files[0].name);
      const fw = document.getElementById("framework").value;
      if (fw) data.append("framework", fw);
      const job = document.getElementById("job_id").value.trim();
      if (job) data.append("job_id", job);
      data.append("source", "web");
      send(data);
    });

    function send(data) {
      submit.disabled = true;
      progressBox.hidden = false;
      bar.value = 0;
      bar.removeAttribute("aria-busy");
      status.textContent = "Uploading…";
      const xhr = new XMLHttpRequest();
      xhr.open("POST", form.dataset.api);
      xhr.setRequestHeader("X-CSRF-Token", csrf());
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.addEventListener("progress", (ev) => {
        if (!ev.lengthComputable) return;
        const pct = Math.round((ev.loaded / ev.total) * 100);
        bar.value = pct;
        status.textContent = "Uploading… " + pct + "% of " + human(ev.total);
      });
      xhr.upload.addEventListener("load", () => {
        bar.value = 100;
        status.textContent = "Scanning… (redacting secrets, matching rules)";
      });
      xhr.addEventListener("load", () => {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
        if (xhr.status === 201 || xhr.status === 202) {
          const id = body && body.id;
          if (xhr.status === 201) return show(id);
          return poll(id, xhr.getResponseHeader("Location"));
        }
        fail(body, xhr.status);
      });
      xhr.addEventListener("error", () => fail(null, 0));
      xhr.send(data);
    }

    function fail(body, code) {
      submit.disabled = false;
      progressBox.hidden = true;
      if (body && body.detail) showError(body.title || "Error", body.detail);
      else if (code === 0) showError("Upload failed", "the connection broke; check the service and try again");
      else showError("Error " + code, "the service could not take the upload");
    }

    async function poll(id, location) {
      status.textContent = "Scanning a large upload… this page updates when it is done";
      for (;;) {
        await new Promise((r) => setTimeout(r, 1000));
        let res;
        try { res = await fetch(location, { headers: { Accept: "application/json" } }); } catch (e) { continue; }
        const body = await res.json().catch(() => null);
        if (!res.ok) return fail(body, res.status);
        if (body.status === "done") return show(id);
        if (body.status === "failed") return fail(body.error || { title: "Failed", detail: "the analysis failed" }, 500);
      }
    }

    // The report replaces the upload page in place (no reload); the address bar gets its permalink.
    async function show(id) {
      const url = "/analyses/" + encodeURIComponent(id);
      try {
        const res = await fetch(url, { headers: { Accept: "text/html" } });
        if (!res.ok) throw new Error(String(res.status));
        const doc = new DOMParser().parseFromString(await res.text(), "text/html");
        const main = doc.querySelector("main");
        if (!main) throw new Error("no main");
        document.querySelector("main").replaceWith(document.adoptNode(main));
        document.title = doc.title;
        document.body.dataset.page = doc.body.dataset.page;
        document.querySelectorAll(".nav a").forEach((a) => a.removeAttribute("aria-current"));
        history.pushState({ analysis: id }, "", url);
        enhance(document.querySelector("main"));
        document.querySelector("main").focus();
      } catch (e) {
        window.location.assign(url);
      }
    }
    window.addEventListener("popstate", () => window.location.reload());
  }

  // --- log viewer: GitHub-style line and range permalinks (#L120 / #L120-L140) ---------------------
  function initViewer() {
    const table = document.querySelector("[data-log-viewer]");
    if (!table) return;
    let anchor = null;
    const rows = () => Array.from(table.querySelectorAll("tr[data-line]"));
    const apply = () => {
      const m = /^#L(\d+)(?:-L(\d+))?$/.exec(window.location.hash);
      rows().forEach((r) => r.classList.remove("selected"));
      if (!m) return;
      let a = Number(m[1]);
      let b = Number(m[2] || m[1]);
      if (a > b) [a, b] = [b, a];
      const first = Number(table.dataset.firstLine);
      const last = Number(table.dataset.lastLine);
      if (a < first || a > last) {
        // the range starts outside this page: ask the server for the page holding it
        const u = new URL(window.location.href);
        u.searchParams.set("line", String(a));
        u.searchParams.delete("offset");
        if (u.toString().split("#")[0] !== window.location.href.split("#")[0]) {
          window.location.replace(u.pathname + u.search + window.location.hash);
          return;
        }
      }
      let firstRow = null;
      rows().forEach((r) => {
        const n = Number(r.dataset.line);
        if (n >= a && n <= b) { r.classList.add("selected"); firstRow = firstRow || r; }
      });
      if (firstRow) firstRow.scrollIntoView({ block: "center" });
    };
    table.addEventListener("click", (ev) => {
      const link = ev.target.closest("a.ln-link");
      if (!link) return;
      ev.preventDefault();
      const n = Number(link.closest("tr").dataset.line);
      if (ev.shiftKey && anchor !== null && anchor !== n) {
        const a = Math.min(anchor, n), b = Math.max(anchor, n);
        history.replaceState(null, "", "#L" + a + "-L" + b);
      } else {
        anchor = n;
        history.replaceState(null, "", "#L" + n);
      }
      apply();
    });
    window.addEventListener("hashchange", apply);
    apply();
  }

  function enhance(scope) {
    initCopy(scope);
    initTabs(scope);
  }

  document.addEventListener("DOMContentLoaded", () => {
    initTheme();
    enhance(document);
    initUpload();
    initViewer();
  });
})();
