// The Limits screen (#/limits) and one limit (#/limits/{name}): chart, slots, queue, edits.

import {chart, legend} from './chart.js';
import {
  api, badge, confirmDialog, enc, errorBox, h, roughDuration, showError, syncTable, timeEl, toast,
} from './lib.js';

const SLOTS_PAGE = 200; // a limit's slots a page, on its screen

// ---------------------------------------------------------------------------------------------
// #/limits

export function renderLimits(root, scope) {
  const tbody = h('tbody');
  const table = h('table', {class: 'grid', testid: 'limits-table'},
    h('thead', {}, h('tr', {}, ['Limit', 'Capacity', 'In use', 'Busy', 'Reserved', 'Waiting', 'Max hold']
      .map((t) => h('th', {}, t)))),
    tbody);
  const empty = h('p', {class: 'empty', testid: 'limits-empty', hidden: true},
    'No limit is declared. Add one in duro.config.py: ',
    h('code', {}, 'define_workspace(limits={"calls": Limit(capacity=20, max_hold="45m")})'));
  const error = h('div', {class: 'error-box', testid: 'limits-error', hidden: true});
  root.append(h('div', {class: 'page-head'}, h('h1', {}, 'Limits'),
    h('span', {class: 'muted small'}, 'Slots per box; overrides win over duro.config.py until reset.')),
  error, table, empty);

  const draw = (limits) => {
    tbody.replaceChildren(...limits.map(limitRow));
    table.hidden = !limits.length;
    empty.hidden = !!limits.length;
  };
  const refresh = scope.refresher(async () => {
    try {
      const {data} = await api('GET', '/api/limits');
      if (!scope.alive) return;
      showError(error, null);
      draw(data.limits);
    } catch (err) {
      if (scope.alive) showError(error, err);
    }
  });
  scope.on('limits', (event) => draw(event.limits));
  scope.on('reload', refresh);
  scope.on('live', refresh);
  // `limits` events follow the counts; an override made elsewhere (the CLI) shows on the next poll.
  scope.every(10000, refresh);
  refresh();
}

function limitRow(limit) {
  return h('tr', {testid: `limit-row-${limit.name}`, 'data-limit': limit.name},
    h('td', {}, h('a', {href: `#/limits/${enc(limit.name)}`, testid: 'limit-link'}, limit.name)),
    h('td', {testid: 'limit-capacity'}, capacityText(limit)),
    h('td', {}, meter(limit)),
    h('td', {class: 'num', testid: 'limit-busy'}, limit.busy),
    h('td', {class: 'num', testid: 'limit-reserved'}, limit.reserved),
    h('td', {class: 'num', testid: 'limit-waiting'}, limit.waiting),
    h('td', {testid: 'limit-max-hold'}, maxHoldText(limit)));
}

function capacityText(limit) {
  return [h('span', {class: 'num'}, limit.effective_capacity), limit.capacity_override != null
    ? [' ', badge(`override · config ${limit.capacity}`, 'override',
      {testid: 'capacity-override-badge', title: `duro.config.py says ${limit.capacity}`})]
    : null];
}

function maxHoldText(limit) {
  return [limit.effective_max_hold, limit.max_hold_override != null
    ? [' ', badge(`override · config ${limit.max_hold}`, 'override',
      {testid: 'max-hold-override-badge', title: `duro.config.py says ${limit.max_hold}`})]
    : null];
}

function meter(limit) {
  const capacity = Math.max(1, limit.effective_capacity);
  const pct = (n) => `${Math.min(100, (100 * n) / capacity)}%`;
  return h('div', {class: 'meter-cell', title: `${limit.busy} busy + ${limit.reserved} reserved of ${limit.effective_capacity}`},
    h('div', {class: 'meter'},
      h('span', {class: 'meter-busy', style: `width: ${pct(limit.busy)}`}),
      h('span', {class: 'meter-reserved', style: `width: ${pct(limit.reserved)}`})),
    h('span', {class: 'small muted num'}, `${limit.busy + limit.reserved} / ${limit.effective_capacity}`));
}

// ---------------------------------------------------------------------------------------------
// #/limits/{name}

export function renderLimit(root, scope, [name]) {
  const base = `/api/limits/${enc(name)}`;
  const stats = h('div', {class: 'stats'});
  const chartBox = h('div', {class: 'chart-box', testid: 'limit-chart', style: 'flex: 1 1 480px; min-width: 0'});
  const lastHour = h('div', {class: 'stats', testid: 'limit-last-hour', 'aria-label': 'Last hour',
    style: 'display: grid; grid-template-columns: repeat(2, minmax(120px, 1fr)); gap: 8px; flex: 0 0 auto'});
  const minutes = h('select', {testid: 'chart-minutes', 'aria-label': 'Chart window',
    onchange: () => refreshHistory()},
  [5, 15, 60].map((m) => h('option', {value: m, selected: m === 15}, `last ${m} min`)));
  const slotsBox = h('div');
  const queueBox = h('div');
  const queueMore = h('button', {testid: 'queue-load-more', hidden: true}, 'Load more');
  const keysBox = h('div');
  const keySearch = h('input', {type: 'search', testid: 'keys-search', placeholder: 'Search keys',
    'aria-label': 'Search keys', oninput: () => refreshKeys()});
  const keysSection = h('section', {testid: 'keys-section', hidden: true},
    h('div', {class: 'section-head'}, h('h2', {}, 'Keys ', h('span', {class: 'muted small'}, 'busiest first')),
      keySearch),
    keysBox);
  const error = h('div', {class: 'error-box', testid: 'limit-error', hidden: true});
  let limit = null;

  const capacity = settingForm({
    name: 'capacity', label: 'Capacity', type: 'number', placeholder: 'e.g. 20',
    help: 'Raising it hands slots to waiting runs at once; lowering it takes no slot back.',
    parse: (text) => (/^-?\d+$/.test(text.trim()) ? Number(text) : text),
    put: (value) => api('PUT', `${base}/capacity`, {capacity: value}),
    current: (l) => String(l.effective_capacity),
    overridden: (l) => l.capacity_override != null,
    config: (l) => String(l.capacity),
    saved: (l) => `Capacity of ${name} is now ${l.effective_capacity}`,
    onSaved: (l) => update(l, true),
  });
  const maxHold = settingForm({
    name: 'max-hold', label: 'Max hold', type: 'text', placeholder: 'e.g. 45m, 2h',
    help: 'Read when a slot is granted: a change applies to later grants.',
    parse: (text) => text.trim(),
    put: (value) => api('PUT', `${base}/max-hold`, {max_hold: value}),
    current: (l) => l.effective_max_hold,
    overridden: (l) => l.max_hold_override != null,
    config: (l) => l.max_hold,
    saved: (l) => `Max hold of ${name} is now ${l.effective_max_hold}`,
    onSaved: (l) => update(l, true),
  });

  const page = h('div', {testid: 'limit-detail', hidden: true},
    h('div', {class: 'page-head'}, h('h1', {}, 'Limit ', h('span', {class: 'mono'}, name)),
      h('a', {href: '#/limits', class: 'small'}, '← all limits')),
    stats,
    h('section', {}, h('div', {class: 'section-head'}, h('h2', {}, 'Busy and waiting'), legend(), minutes),
      h('div', {style: 'display: flex; gap: 10px; align-items: flex-start; flex-wrap: wrap'}, chartBox, lastHour)),
    h('section', {}, h('h2', {}, 'Slots ', h('span', {class: 'muted small'}, 'busy and reserved')), slotsBox),
    h('section', {}, h('h2', {}, 'Queue ', h('span', {class: 'muted small'}, 'in order: 1 is next')), queueBox,
      h('div', {class: 'more'}, queueMore)),
    keysSection,
    h('section', {}, h('h2', {}, 'Settings'), h('div', {class: 'settings'}, capacity.node, maxHold.node)));
  root.append(error, page);

  // The numbers, from a slots answer, a PUT answer or a `limits` event.
  const update = (next, fromUser = false) => {
    limit = next;
    stats.replaceChildren(
      stat('capacity', 'Capacity', capacityText(next)),
      stat('busy', 'Busy', next.busy),
      stat('reserved', 'Reserved', next.reserved),
      stat('waiting', 'Waiting', next.waiting),
      stat('max-hold', 'Max hold', maxHoldText(next)));
    capacity.update(next, fromUser);
    maxHold.update(next, fromUser);
    keysSection.hidden = next.per_key == null;
  };

  // A keyed limit's keys, busiest first (the search keeps those containing its text), each with
  // its capacity: per_key, or an operator's override (Save / Reset on its row).
  const refreshKeys = scope.refresher(async () => {
    if (!limit || limit.per_key == null) return;
    const text = keySearch.value.trim();
    try {
      const {data} = await api('GET', `${base}/keys?limit=50${text ? `&search=${encodeURIComponent(text)}` : ''}`);
      if (!scope.alive) return;
      keysBox.replaceChildren(keysTable(data.keys, data.limit.per_key, setKeyCapacity));
    } catch (err) {
      if (scope.alive) keysBox.replaceChildren(errorBox(err));
    }
  });

  const setKeyCapacity = async (key, value, errorNode) => {
    showError(errorNode, null);
    try {
      await api('PUT', `${base}/keys/${enc(key)}/capacity`, {capacity: value});
      toast(value === null ? `Key ${key} of ${name} back to ${limit.per_key}` : `Key ${key} of ${name} now holds ${value}`);
      refreshKeys();
      refreshSlots();
    } catch (err) {
      showError(errorNode, err);
    }
  };

  // A long queue comes a page at a time: a refresh reloads as many slots as are shown, and the
  // next page comes as the queue scrolls to its end (or from the button).
  let wanted = SLOTS_PAGE;
  const refreshSlots = scope.refresher(async () => {
    try {
      let slots = [];
      let cursor = null;
      let data;
      do {
        const size = Math.min(1000, wanted - slots.length);
        ({data} = await api('GET', `${base}/slots?limit=${size}${cursor ? `&cursor=${enc(cursor)}` : ''}`));
        slots = slots.concat(data.slots);
        cursor = data.next_cursor;
      } while (cursor && slots.length < wanted && scope.alive);
      if (!scope.alive) return;
      showError(error, null);
      page.hidden = false;
      update(data.limit);
      const held = slots.filter((s) => s.state !== 'waiting');
      const queue = slots.filter((s) => s.state === 'waiting');
      syncTable(slotsBox, slotsTable(held, release), 'data-slot-id');
      syncTable(queueBox, queueTable(queue), 'data-slot-id');
      queueMore.hidden = !cursor;
      if (cursor && queueMore.getBoundingClientRect().top < innerHeight + 200) showMore(); // still in sight
      refreshKeys();
    } catch (err) {
      if (!scope.alive) return;
      if (err.status === 404) {
        page.hidden = true;
        error.hidden = true;
        root.replaceChildren(h('h1', {}, 'Limit not found'), h('p', {class: 'empty', testid: 'limit-not-found'},
          `No limit is named “${name}”. `, h('a', {href: '#/limits'}, 'All limits')));
        scope.close(); // nothing to keep fresh
      } else {
        showError(error, err);
      }
    }
  });

  const showMore = () => {
    if (wanted <= slotsShown()) {
      wanted += SLOTS_PAGE;
      refreshSlots();
    }
  };
  const slotsShown = () => slotsBox.querySelectorAll('tr[data-slot-id]').length
    + queueBox.querySelectorAll('tr[data-slot-id]').length;
  queueMore.onclick = showMore;
  if ('IntersectionObserver' in window) {
    const watcher = new IntersectionObserver((seen) => {
      if (seen.some((entry) => entry.isIntersecting) && scope.alive) showMore();
    }, {rootMargin: '200px'});
    watcher.observe(queueMore);
    scope.cleanups.push(() => watcher.disconnect());
  }

  const refreshHistory = scope.refresher(async () => {
    try {
      const {data} = await api('GET', `${base}/history?minutes=${minutes.value}`);
      if (!scope.alive) return;
      lastHour.replaceChildren(...lastHourStats(data.last_hour));
      const width = (chartBox.clientWidth || root.clientWidth) - 14; // drawn at its size: labels stay small
      chartBox.replaceChildren(chart(data.points, limit ? limit.effective_capacity : 0, width));
    } catch (err) {
      if (scope.alive) chartBox.replaceChildren(errorBox(err));
    }
  }, 1000);

  const release = async (slot) => {
    const ok = await confirmDialog({
      title: 'Release this slot?',
      message: 'The slot goes back to the limit now and the next run in the queue gets it. '
        + 'The run holding it is not told: use this for a slot whose holder is gone or stuck.',
      details: [['slot', slot.id], ['state', slot.state], ['run', slot.run_id], ['label', slot.label]],
      confirmLabel: 'Release',
      confirmTestid: 'confirm-release',
    });
    if (!ok) return;
    try {
      const {data} = await api('POST', `/api/slots/${enc(slot.id)}/release`);
      toast(data.released ? `Released ${slot.id}` : `${slot.id} was already free`);
    } catch (err) {
      toast(err.message, 'error');
    }
    refreshSlots();
    refreshHistory();
  };

  scope.on('limits', (event) => {
    const mine = event.limits.find((l) => l.name === name);
    if (!mine) return;
    update(mine);
    refreshSlots();
    refreshHistory();
  });
  scope.on('live', refreshSlots);
  scope.on('reload', refreshSlots);
  scope.every(5000, () => {
    refreshHistory();
    refreshSlots();
  });
  refreshSlots();
  refreshHistory();
}

function stat(key, label, value) {
  return h('div', {class: 'stat', testid: `stat-${key}`}, h('div', {class: 'stat-label'}, label),
    h('div', {class: 'stat-value'}, value));
}

/** The limit's last hour, from the store (every process): waits from enqueue to held (p50, p90,
 *  p99 of the slots granted), grants, lost releases (slots max_hold took back) and timeouts. */
function lastHourStats(last) {
  const hint = (text) => ({title: `last hour: ${text}`});
  const count = (key, label, n, title, alarm = false) => h('div', {class: 'stat', testid: `last-hour-${key}`,
    'data-value': n, ...hint(title)}, h('div', {class: 'stat-label'}, label),
  h('div', {class: `stat-value${alarm && n > 0 ? ' err' : ''}`}, n));
  const wait = (p, seconds) => h('div', {class: 'stat', testid: `last-hour-wait-p${p}`,
    'data-value': seconds ?? '', ...hint(`${p}% of the slots granted waited at most this long in the queue`)},
  h('div', {class: 'stat-label'}, `Wait p${p}`), h('div', {class: 'stat-value'}, waitText(seconds)));
  return [
    h('div', {class: 'small muted', style: 'grid-column: 1 / -1'}, 'Last hour (every process)'),
    wait(50, last.wait_p50_s),
    wait(90, last.wait_p90_s),
    wait(99, last.wait_p99_s),
    count('granted', 'Granted', last.granted, 'slots that became held, at once or after a wait'),
    count('expired', 'Lost releases', last.expired,
      'slots max_hold took back: each one a release_slot that never happened', true),
    count('timed-out', 'Timeouts', last.timed_out, 'runs whose timeout passed in the queue', true),
  ];
}

/** 0 ms, 850 ms, 4.2 s, 12 s, 3 min: a wait in seconds, or — when no slot was granted. */
function waitText(seconds) {
  if (seconds == null) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 10) return `${(Math.round(seconds * 10) / 10)} s`;
  return roughDuration(seconds * 1000);
}

function keyCell(slot, keyed) {
  return keyed ? h('td', {class: 'label-cell mono', testid: 'slot-key'}, slot.key ?? '—') : null;
}

function slotsTable(slots, release) {
  if (!slots.length) return h('p', {class: 'empty', testid: 'slots-empty'}, 'No slot is busy.');
  const keyed = slots.some((slot) => slot.key != null);
  const heads = ['State', 'Run', ...(keyed ? ['Key'] : []), 'Label', 'Held since', 'Expires', ''];
  return h('table', {class: 'grid', testid: 'slots-table'},
    h('thead', {}, h('tr', {}, heads.map((t) => h('th', {}, t)))),
    h('tbody', {}, slots.map((slot) => h('tr', {testid: 'slot-row', 'data-slot-id': slot.id, 'data-state': slot.state},
      h('td', {}, h('span', {class: `badge slot-${slot.state}`}, slot.state)),
      h('td', {}, runLink(slot.run_id, 'slot-run-link')),
      keyCell(slot, keyed),
      h('td', {class: 'label-cell'}, slot.label ?? h('span', {class: 'muted'}, '—')),
      h('td', {}, slot.state === 'reserved'
        ? h('span', {class: 'small'}, 'reserved until ', timeEl(slot.reserved_until))
        : timeEl(slot.held_since, {mode: 'since'})),
      h('td', {}, timeEl(slot.expires_at)),
      h('td', {class: 'actions-cell'}, h('button', {class: 'danger small', testid: `release-${slot.id}`,
        onclick: () => release(slot)}, 'Release'))))));
}

function queueTable(slots) {
  if (!slots.length) return h('p', {class: 'empty', testid: 'queue-empty'}, 'Nobody is waiting.');
  const keyed = slots.some((slot) => slot.key != null);
  const heads = ['#', 'Run', ...(keyed ? ['Key'] : []), 'Label', 'Waiting', 'Gives up'];
  return h('table', {class: 'grid', testid: 'queue-table'},
    h('thead', {}, h('tr', {}, heads.map((t) => h('th', {}, t)))),
    h('tbody', {}, slots.map((slot) => h('tr', {testid: 'queue-row', 'data-slot-id': slot.id,
      'data-position': slot.position},
    h('td', {class: 'num'}, slot.position),
    h('td', {}, runLink(slot.run_id, 'queue-run-link')),
    keyCell(slot, keyed),
    h('td', {class: 'label-cell'}, slot.label ?? h('span', {class: 'muted'}, '—')),
    h('td', {}, slot.enqueued_at ? timeEl(slot.enqueued_at, {mode: 'since'})
      : slot.waited_ms != null ? roughDuration(slot.waited_ms) : '—'),
    h('td', {}, timeEl(slot.timeout_at))))));
}

function keysTable(keys, perKey, setCapacity) {
  if (!keys.length) return h('p', {class: 'empty', testid: 'keys-empty'}, 'No key holds or waits for a slot.');
  return h('table', {class: 'grid', testid: 'keys-table'},
    h('thead', {}, h('tr', {}, ['Key', 'Capacity', 'Busy', 'Reserved', 'Waiting', 'Set capacity']
      .map((t) => h('th', {}, t)))),
    h('tbody', {}, keys.map((k) => {
      const input = h('input', {type: 'number', min: 1, testid: 'key-capacity-input', value: k.capacity,
        'aria-label': `Capacity of key ${k.key}`, style: 'width: 6em'});
      const error = h('div', {class: 'error-box', testid: 'key-capacity-error', hidden: true, role: 'alert'});
      const save = (e) => {
        e.preventDefault();
        const text = input.value.trim();
        setCapacity(k.key, /^-?\d+$/.test(text) ? Number(text) : text, error);
      };
      return h('tr', {testid: 'key-row', 'data-key': k.key},
        h('td', {class: 'label-cell mono'}, k.key),
        h('td', {class: 'num', testid: 'key-capacity'}, String(k.capacity),
          k.overridden ? h('span', {class: 'badge', testid: 'key-override-badge'}, ` override · per_key ${perKey}`) : ''),
        h('td', {class: 'num', testid: 'key-busy'}, k.busy),
        h('td', {class: 'num'}, k.reserved),
        h('td', {class: 'num', testid: 'key-waiting'}, k.waiting),
        h('td', {}, h('form', {class: 'setting', onsubmit: save, novalidate: true}, input,
          h('button', {type: 'submit', class: 'primary small', testid: 'key-capacity-save'}, 'Save'),
          h('button', {type: 'button', class: 'small', testid: 'key-capacity-reset', disabled: !k.overridden,
            onclick: () => setCapacity(k.key, null, error)}, 'Reset'), error)));
    })));
}

function runLink(id, testid) {
  return id ? h('a', {href: `#/runs/${enc(id)}`, class: 'mono', testid}, id) : h('span', {class: 'muted'}, '—');
}

/** The API's message speaks JSON ("or null to reset"); here the word is the Reset button. */
function forPeople(err) {
  const text = String(err && err.message || err).replace(/,? or null to reset to duro\.config\.py/g,
    ', or Reset to go back to duro.config.py');
  return Object.assign(new Error(text), {status: err && err.status, body: err && err.body});
}

/** A one-field form that PUTs a value, with a Reset (PUT null) and the 422 message under it.
 *  The input keeps what the user types: live updates fill it only while it is untouched. */
function settingForm(o) {
  const input = h('input', {type: o.type, testid: `${o.name}-input`, placeholder: o.placeholder,
    'aria-label': o.label, oninput: () => {
      dirty = true;
    }});
  const save = h('button', {type: 'submit', class: 'primary', testid: `${o.name}-save`}, 'Save');
  const reset = h('button', {type: 'button', testid: `${o.name}-reset`, onclick: () => send(null)}, 'Reset');
  const note = h('div', {class: 'small muted'});
  const error = h('div', {class: 'error-box', testid: `${o.name}-error`, hidden: true, role: 'alert'});
  let dirty = false;
  let overridden = false;

  const send = async (value) => {
    showError(error, null);
    save.disabled = reset.disabled = true;
    try {
      const {data} = await o.put(value);
      dirty = false;
      o.onSaved(data.limit);
      toast(value === null ? `${o.label} reset to duro.config.py` : o.saved(data.limit));
    } catch (err) {
      showError(error, forPeople(err));
    } finally {
      save.disabled = false;
      reset.disabled = !overridden;
    }
  };

  const node = h('form', {class: 'setting', testid: `${o.name}-form`, novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    const text = input.value;
    if (!text.trim()) {
      showError(error, new Error('Enter a value, or Reset to go back to duro.config.py.'));
      return;
    }
    send(o.parse(text));
  }},
  h('label', {}, h('span', {class: 'setting-label'}, o.label), input), save, reset, note, error,
  h('div', {class: 'small muted'}, o.help));

  return {
    node,
    update(limit, fromUser) {
      if (!dirty || fromUser) input.value = o.current(limit);
      overridden = o.overridden(limit);
      reset.disabled = !overridden;
      note.textContent = overridden ? `Overridden; duro.config.py says ${o.config(limit)}.` : 'As in duro.config.py.';
    },
  };
}
