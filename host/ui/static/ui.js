// berth web UI: keeps a page current from the agent's blocking queries,
// runs the page's actions through the JSON API, and keeps the ACL token in
// the tab's session storage. Hand-written, no dependencies, no build step.
'use strict';
(function () {
  const TOKEN_KEY = 'berth-token';
  const main = document.getElementById('main');
  const live = document.getElementById('live');
  const banner = document.getElementById('banner');

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const t = token();
    if (t) h['X-Berth-Token'] = t;
    return h;
  }
  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }

  function showBanner(text, bad) {
    banner.textContent = text;
    banner.classList.toggle('bad', !!bad);
    banner.hidden = false;
  }
  function hideBanner() { banner.hidden = true; banner.textContent = ''; }

  // --- live updates ---
  let generation = 0; // bumped to restart the loop (a new token)
  let controller = null;

  // replaceLive swaps the live fragment, keeping the focused element
  // (by id or by its action and target) focused across the swap.
  function replaceLive(html) {
    const active = document.activeElement;
    let key = null;
    if (active && live.contains(active)) {
      if (active.id) key = '#' + CSS.escape(active.id);
      else if (active.dataset.action) key = '[data-action="' + CSS.escape(active.dataset.action) + '"]';
      else if (active.getAttribute('href')) key = '[href="' + CSS.escape(active.getAttribute('href')) + '"]';
    }
    // An error box is an alert when it first appears; the same error
    // again in a re-render is not announced again.
    const shown = new Set();
    live.querySelectorAll('.error').forEach(function (e) { shown.add(e.textContent); });
    live.innerHTML = html;
    live.querySelectorAll('.error[role="alert"]').forEach(function (e) {
      if (shown.has(e.textContent)) e.removeAttribute('role');
    });
    const title = document.getElementById('live-title');
    if (title) document.title = title.dataset.title;
    refreshTimes();
    syncLogs();
    if (key) {
      const again = live.querySelector(key);
      if (again) again.focus();
    }
  }

  // Relative times ("in 30s", "12s ago") are rendered once per change;
  // on a page that does not change (a claim stuck between retries) they
  // are kept current here from their <time datetime>.
  function goDuration(s) {
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + 'h' : '') + (h || m ? m + 'm' : '') + sec + 's';
  }
  function refreshTimes() {
    const now = Date.now();
    live.querySelectorAll('time[data-rel]').forEach(function (t) {
      const at = Date.parse(t.getAttribute('datetime'));
      if (isNaN(at)) return;
      const d = Math.round((at - now) / 1000);
      t.textContent = d < 0 ? goDuration(-d) + ' ago' : 'in ' + goDuration(d);
    });
  }
  setInterval(refreshTimes, 5000);

  function fragmentURL(index) {
    const u = new URL(window.location.href);
    u.searchParams.set('fragment', 'main');
    if (index) u.searchParams.set('index', index); else u.searchParams.delete('index');
    return u.toString();
  }

  async function loop(gen, index) {
    let backoff = 500;
    while (gen === generation) {
      controller = new AbortController();
      let resp, html;
      try {
        resp = await fetch(fragmentURL(index), { headers: headers(), signal: controller.signal, cache: 'no-store' });
        html = await resp.text();
      } catch (e) {
        if (gen !== generation) return;
        showBanner('Connection to the agent lost; retrying in ' + Math.round(backoff / 1000 * 10) / 10 + ' s.', true);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 30000);
        // Read the page as it is now, not a blocking wait from the old
        // index: that would answer only on the next change (or after the
        // whole wait, or never soon when a restarted agent's index is
        // lower), and the banner would stay up meanwhile.
        index = '';
        continue;
      }
      if (gen !== generation) return;
      if (resp.status >= 500) {
        replaceLive(html);
        showBanner('The agent answered ' + resp.status + '; retrying in ' + Math.round(backoff / 100) / 10 + ' s.', true);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 30000);
        index = ''; // as above
        continue;
      }
      backoff = 500;
      hideBanner();
      replaceLive(html);
      if (!resp.ok) return; // 4xx: nothing to wait for until the token changes
      const next = resp.headers.get('X-Berth-Index') || '';
      main.dataset.index = next;
      if (!next) return;
      // The same index back: nothing changed (a wait that ran out, or
      // reads that fail); never ask again in a tight loop.
      if (next === index) await sleep(1000);
      index = next;
    }
  }

  function restart(fromScratch) {
    generation++;
    if (controller) controller.abort();
    if (main.dataset.live !== 'true') return;
    loop(generation, fromScratch ? '' : main.dataset.index);
  }

  // --- token ---
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    const v = input.value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    input.value = '';
    input.placeholder = v ? 'token set' : 'secret ID';
    restart(true);
    startLogs();
  });
  document.getElementById('token-clear').addEventListener('click', function () {
    sessionStorage.removeItem(TOKEN_KEY);
    input.placeholder = 'secret ID';
    restart(true);
    startLogs();
  });
  if (token()) input.placeholder = 'token set';

  // --- actions ---
  const dialog = document.getElementById('confirm');
  function confirmAction(text) {
    return new Promise(function (resolve) {
      document.getElementById('confirm-text').textContent = text;
      dialog.returnValue = '';
      dialog.addEventListener('close', function () { resolve(dialog.returnValue === 'ok'); }, { once: true });
      dialog.showModal();
      document.getElementById('confirm-cancel').focus();
    });
  }

  function toast(text, bad) {
    // The live region is in the page from the start (one inserted with
    // its first message is often not announced).
    const t = document.getElementById('toast');
    t.className = bad ? 'toast bad' : 'toast';
    t.textContent = text;
  }

  async function callAPI(method, path, body) {
    const init = { method: method, headers: headers(body ? { 'Content-Type': 'application/json' } : {}) };
    if (body) init.body = JSON.stringify(body);
    const resp = await fetch(path, init);
    if (resp.ok) return null;
    let msg = 'HTTP ' + resp.status;
    try { const e = await resp.json(); msg = e.message + ' (' + e.code + ', HTTP ' + resp.status + ')'; } catch (e) { /* not JSON */ }
    return msg;
  }

  const actions = {
    'stop-job': function (b) {
      return { text: 'Stop job "' + b.dataset.job + '"? Its allocations are stopped and their volume claims released.',
        method: 'DELETE', path: '/v1/job/' + encodeURIComponent(b.dataset.job), done: 'Job stopped.' };
    },
    'drain-on': function (b) {
      return { text: 'Drain node ' + b.dataset.node + '? Its allocations are moved off within an hour and it takes no new ones.',
        method: 'PUT', path: '/v1/node/' + encodeURIComponent(b.dataset.node) + '/drain',
        body: { drain: { deadline_ms: 3600000 } }, done: 'Drain started.' };
    },
    'drain-off': function (b) {
      return { text: 'Stop draining node ' + b.dataset.node + ' and mark it eligible again?',
        method: 'PUT', path: '/v1/node/' + encodeURIComponent(b.dataset.node) + '/drain',
        body: { mark_eligible: true }, done: 'Drain stopped.' };
    },
    'eligibility': function (b) {
      const e = b.dataset.eligibility;
      return { text: 'Mark node ' + b.dataset.node + ' ' + e + (e === 'eligible' ? ' for new allocations?' : '? It keeps its allocations and takes no new ones.'),
        method: 'PUT', path: '/v1/node/' + encodeURIComponent(b.dataset.node) + '/eligibility',
        body: { eligibility: e }, done: 'Node marked ' + e + '.' };
    },
    'release-claim': function (b) {
      return { text: 'Release operator claim ' + b.dataset.claim + ' on volume ' + b.dataset.volume + '?',
        method: 'DELETE', path: '/v1/volume/csi/' + encodeURIComponent(b.dataset.volume) + '/claims/' + encodeURIComponent(b.dataset.claim),
        done: 'Claim released.' };
    },
  };

  document.addEventListener('click', async function (ev) {
    const b = ev.target.closest('button[data-action]');
    if (!b || !actions[b.dataset.action]) return;
    const a = actions[b.dataset.action](b);
    if (!(await confirmAction(a.text))) return;
    b.disabled = true;
    const err = await callAPI(a.method, a.path, a.body);
    b.disabled = false;
    toast(err ? 'Failed: ' + err : a.done, !!err);
  });

  // --- logs: the tail of each task's log, followed ---
  // The live fragment lists the allocation's tasks ([data-log-alloc]); the
  // boxes live below it, outside the part that is swapped, so a stream
  // keeps its text across re-renders. A box is added when its task first
  // reports, also when the page was first served as an error (a
  // navigation carries no token; the fragment read with it does).
  const logBoxes = new Map(); // task name -> {box, sel, controller}
  let logAlloc = '';

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text) e.textContent = text;
    return e;
  }

  function followBox(entry) {
    if (entry.controller) entry.controller.abort();
    entry.controller = new AbortController();
    followLog(entry.box, entry.sel.value, entry.controller.signal);
  }

  function logSection() {
    let sec = document.getElementById('logs');
    if (sec) return sec;
    sec = el('section', { id: 'logs', class: 'logs', 'aria-labelledby': 'h-logs' });
    sec.appendChild(el('h2', { id: 'h-logs' }, 'Logs'));
    sec.appendChild(el('p', { class: 'hint' }, "The tail of each task's log, followed as it is written."));
    main.appendChild(sec);
    return sec;
  }

  // syncLogs adds a followed box for each task the live fragment lists.
  function syncLogs() {
    const list = live.querySelector('[data-log-alloc]');
    if (!list) return;
    const alloc = list.dataset.logAlloc;
    if (alloc !== logAlloc) {
      stopLogs();
      logBoxes.forEach(function (e) { e.box.remove(); });
      logBoxes.clear();
      logAlloc = alloc;
    }
    list.querySelectorAll('[data-log-task]').forEach(function (li) {
      const task = li.dataset.logTask;
      if (logBoxes.has(task)) return;
      const box = el('div', { class: 'log' });
      box.dataset.logAlloc = alloc;
      box.dataset.logTask = task;
      box.appendChild(el('h3', {}, task));
      const label = el('label', {}, 'Stream ');
      const sel = el('select', { 'data-log-type': '' });
      sel.appendChild(el('option', { value: 'stdout' }, 'stdout'));
      sel.appendChild(el('option', { value: 'stderr' }, 'stderr'));
      label.appendChild(sel);
      box.appendChild(label);
      box.appendChild(el('pre', { tabindex: '0', 'aria-label': 'log of task ' + task, 'aria-live': 'off' }));
      box.appendChild(el('p', { class: 'log-status', role: 'status' }));
      logSection().appendChild(box);
      const entry = { box: box, sel: sel, controller: null };
      sel.onchange = function () { followBox(entry); };
      logBoxes.set(task, entry);
      followBox(entry);
    });
  }

  function stopLogs() {
    logBoxes.forEach(function (e) { if (e.controller) e.controller.abort(); e.controller = null; });
  }

  // startLogs follows every box again from the start (a new token).
  function startLogs() {
    logBoxes.forEach(followBox);
    syncLogs();
  }

  async function followLog(box, type, signal) {
    const pre = box.querySelector('pre');
    const status = box.querySelector('.log-status');
    const path = '/v1/client/fs/logs/' + encodeURIComponent(box.dataset.logAlloc) +
      '?task=' + encodeURIComponent(box.dataset.logTask) + '&type=' + type + '&follow=true&origin=end&offset=16384';
    pre.textContent = '';
    let backoff = 500;
    while (!signal.aborted) {
      try {
        const resp = await fetch(path, { headers: headers(), signal: signal });
        if (!resp.ok) {
          let msg = 'HTTP ' + resp.status;
          try { const e = await resp.json(); msg = e.message + ' (' + e.code + ')'; } catch (e) { /* not JSON */ }
          status.textContent = 'Log not available: ' + msg;
          return;
        }
        status.textContent = 'Following.';
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        pre.textContent = '';
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.textContent += dec.decode(r.value, { stream: true });
          // Keep the last 64 KiB on the page.
          if (pre.textContent.length > 65536) pre.textContent = pre.textContent.slice(-65536);
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        status.textContent = 'The log ended (the task stopped).';
        return;
      } catch (e) {
        if (signal.aborted) return;
        status.textContent = 'Log stream lost; retrying.';
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 30000);
      }
    }
  }

  // Leaving the page ends its long poll and log streams at once: a
  // request left waiting would hold one of the browser's few connections
  // to the agent until the agent answered it. A page restored from the
  // back/forward cache starts them again.
  window.addEventListener('pagehide', function () {
    generation++;
    if (controller) controller.abort();
    stopLogs();
  });
  window.addEventListener('pageshow', function (ev) {
    if (ev.persisted) {
      restart(true);
      startLogs();
    }
  });

  // A token in this tab: the page was served without it (a navigation
  // sends no header), so read it again with the token first.
  restart(!!token());
  startLogs();
})();
