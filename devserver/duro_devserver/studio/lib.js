// Small helpers shared by Studio's screens: building DOM nodes, the API client, live events,
// time formatting, the confirmation dialog and toasts. Text always goes in through text nodes,
// never through innerHTML: labels, inputs, outputs and errors come from users.

const PROPERTIES = new Set(['value', 'checked', 'disabled', 'hidden', 'open', 'selected', 'required']);

/** h('a', {href, testid, class, onclick}, ...children): an element; children are nodes or text. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'testid') el.dataset.testid = value;
    else if (key === 'class') el.className = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (PROPERTIES.has(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

/** The same for SVG elements (every attribute set as is). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === 'testid') el.dataset.testid = value;
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// ---------------------------------------------------------------------------------------------
// The API

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `the server answered ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

/** Calls the API; resolves to {status, data} for a 2xx answer, rejects with an ApiError otherwise.
 *  `body` undefined sends no body; anything else (null included) is sent as JSON. */
export async function api(method, path, body) {
  const init = {method, headers: {Accept: 'application/json'}};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, {error: 'network', message: 'The dev server does not answer: is `duro dev` running?'});
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = {message: text};
    }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return {status: response.status, data};
}

export const enc = encodeURIComponent;

// ---------------------------------------------------------------------------------------------
// Live events: one EventSource for the page, re-dispatched on `events` as CustomEvents whose
// `detail` is the parsed data. Types: run, limits, reload, plus `live` / `offline` for the link
// itself (a `live` after an `offline` means events may have been missed: screens refetch).

export const events = new EventTarget();

export function connectEvents() {
  const source = new EventSource('/api/events');
  for (const type of ['run', 'limits', 'reload']) {
    source.addEventListener(type, (message) => {
      let detail;
      try {
        detail = JSON.parse(message.data);
      } catch {
        return;
      }
      events.dispatchEvent(new CustomEvent(type, {detail}));
    });
  }
  source.addEventListener('open', () => events.dispatchEvent(new CustomEvent('live')));
  source.addEventListener('error', () => events.dispatchEvent(new CustomEvent('offline')));
  return source;
}

/** What a screen owns while it is shown: event listeners and timers, all dropped on navigation. */
export class Scope {
  constructor() {
    this.alive = true;
    this.cleanups = [];
  }

  on(type, fn) {
    const listener = (event) => this.alive && fn(event.detail);
    events.addEventListener(type, listener);
    this.cleanups.push(() => events.removeEventListener(type, listener));
  }

  every(ms, fn) {
    const id = setInterval(() => this.alive && fn(), ms);
    this.cleanups.push(() => clearInterval(id));
  }

  /** A refresh function run at most every `ms` (first call at once, then one trailing call),
   *  never twice at the same time, and never after the screen is gone. */
  refresher(fn, ms = 250) {
    let last = 0;
    let timer = null;
    let running = false;
    let again = false;
    const run = async () => {
      if (!this.alive) return;
      if (running) {
        again = true;
        return;
      }
      running = true;
      last = Date.now();
      try {
        await fn();
      } finally {
        running = false;
        if (again) {
          again = false;
          schedule();
        }
      }
    };
    const schedule = () => {
      if (timer) return;
      const wait = last + ms - Date.now();
      if (wait <= 0) run();
      else timer = setTimeout(() => {
        timer = null;
        run();
      }, wait);
    };
    this.cleanups.push(() => clearTimeout(timer));
    return schedule;
  }

  close() {
    this.alive = false;
    for (const cleanup of this.cleanups) cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// Times (shown in the browser's local time) and durations

export function shortLocal(date) {
  const today = new Date();
  if (date.toDateString() === today.toDateString()) return date.toLocaleTimeString();
  return date.toLocaleString(undefined, {dateStyle: 'short', timeStyle: 'medium'});
}

/** "3 min ago" / "in 5 min" / "just now". */
export function relative(date, now = Date.now()) {
  const seconds = (date.getTime() - now) / 1000;
  const text = roughDuration(Math.abs(seconds) * 1000);
  if (Math.abs(seconds) < 3) return 'just now';
  return seconds < 0 ? `${text} ago` : `in ${text}`;
}

/** 42 s, 3 min, 2 h, 4 d: one unit, for "ago" and "for". */
export function roughDuration(ms) {
  const s = ms / 1000;
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A <time> showing the local time and, muted, how long ago (or until) it is; kept fresh by tick().
 *  mode "since" shows the time elapsed instead ("for 3 min"). */
export function timeEl(iso, {mode = 'relative', testid} = {}) {
  if (!iso) return h('span', {class: 'muted', testid}, '—');
  const date = new Date(iso);
  const rel = h('span', {class: 'rel'});
  const el = h('time', {datetime: iso, title: date.toLocaleString(), 'data-mode': mode, testid},
    h('span', {class: 'abs'}, shortLocal(date)), ' ', rel);
  refreshTime(el);
  return el;
}

function refreshTime(el) {
  const date = new Date(el.getAttribute('datetime'));
  const rel = el.querySelector('.rel');
  rel.textContent = el.dataset.mode === 'since'
    ? `for ${roughDuration(Math.max(0, Date.now() - date.getTime()))}`
    : relative(date);
}

/** Refreshes every relative time on the page (called every few seconds). */
export function tick() {
  for (const el of document.querySelectorAll('time[data-mode]')) refreshTime(el);
}

// ---------------------------------------------------------------------------------------------
// Small pieces of UI

export function badge(text, kind, attrs = {}) {
  return h('span', {...attrs, class: `badge badge-${kind}`}, text);
}

export function statusBadge(status, testid = 'run-status') {
  return h('span', {class: `badge status status-${status}`, testid, 'data-status': status}, status);
}

export function json(value, indent = 2) {
  return JSON.stringify(value, null, indent) ?? 'undefined';
}

/** An error box for a failed API call (or any Error). */
export function errorBox(err, testid = 'error') {
  const box = h('div', {class: 'error-box', testid, role: 'alert'});
  showError(box, err);
  return box;
}

/** Shows ``fresh`` rows in ``tbody``, keeping each row already shown with the same ``key`` attribute
 *  (brought up to date in place), so a live refresh never swaps out the row a reader is on: focus,
 *  a selection and a scroll position stay. */
export function syncRows(tbody, fresh, key) {
  const shown = new Map([...tbody.children].map((row) => [row.getAttribute(key), row]));
  const rows = fresh.map((row) => {
    const old = shown.get(row.getAttribute(key));
    if (!old) return row;
    if (!old.isEqualNode(row)) {
      for (const {name} of [...old.attributes]) if (!row.hasAttribute(name)) old.removeAttribute(name);
      for (const {name, value} of row.attributes) old.setAttribute(name, value);
      old.replaceChildren(...row.childNodes);
    }
    return old;
  });
  if (rows.length !== tbody.children.length || rows.some((row, i) => tbody.children[i] !== row)) {
    tbody.replaceChildren(...rows);
  }
}

/** Shows the table ``fresh`` in ``box``: into the table already there when it has the same columns
 *  (its rows kept as ``syncRows`` keeps them), else in its place (an empty note, new columns). */
export function syncTable(box, fresh, key) {
  const table = box.children.length === 1 ? box.firstElementChild : null;
  if (table?.tagName === 'TABLE' && fresh.tagName === 'TABLE' && table.tHead?.isEqualNode(fresh.tHead)) {
    syncRows(table.tBodies[0], [...fresh.tBodies[0].children], key);
  } else {
    box.replaceChildren(fresh);
  }
}

export function showError(box, err) {
  if (!err) {
    box.hidden = true;
    box.replaceChildren();
    return;
  }
  // replaceChildren, unlike h(), writes a null child as the text "null": build the list without it
  const status = err.status ? `${err.status} ${err.body.error || ''}`.trim() : '';
  box.replaceChildren(...(status ? [h('strong', {}, status, ': ')] : []), err.message);
  box.hidden = false;
}

/** Asks in an in-page <dialog>; resolves true when confirmed. The confirm button gets the testid
 *  `confirmTestid` (e.g. confirm-release) while the dialog is open. */
export function confirmDialog({title, message, details = [], confirmLabel = 'Confirm', confirmTestid = 'confirm'}) {
  const dialog = document.getElementById('confirm-dialog');
  dialog.querySelector('[data-role=title]').textContent = title;
  dialog.querySelector('[data-role=message]').textContent = message;
  dialog.querySelector('[data-role=details]').replaceChildren(
    ...details.map(([term, value]) => [h('dt', {}, term), h('dd', {}, value ?? '—')]).flat());
  const confirm = dialog.querySelector('[data-role=confirm]');
  confirm.textContent = confirmLabel;
  confirm.dataset.testid = confirmTestid;
  dialog.returnValue = '';
  dialog.showModal();
  dialog.querySelector('[data-role=cancel]').focus();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'confirm'), {once: true});
  });
}

/** The short name of an error type: `RunCancelled` for `duro._errors.RunCancelled`. */
export function errorName(type) {
  return String(type ?? 'Error').split('.').pop();
}

const TOASTS_SHOWN = 2;

/** A short message in the top bar, where it covers no control; `kind` is ok, error or reloaded
 *  (also its data-kind). The newest comes first; at most two show at once. */
export function toast(message, kind = 'ok') {
  const el = h('div', {class: `toast toast-${kind}`, testid: 'toast', 'data-kind': kind, role: 'status',
    title: message}, message);
  const box = document.getElementById('toasts');
  box.prepend(el);
  while (box.children.length > TOASTS_SHOWN) box.lastElementChild.remove();
  setTimeout(() => el.remove(), kind === 'error' ? 6000 : 3000);
}
