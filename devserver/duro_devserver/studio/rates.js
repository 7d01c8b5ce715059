// The Rates screen (#/rates) and one rate (#/rates/{name}): its use of the window, waiters, pause,
// a chart of grants and waiters, and the operator's edits.

import {chart} from './chart.js';
import {api, badge, enc, h, showError, timeEl, toast} from './lib.js';

const SAMPLE_MS = 2000;

// ---------------------------------------------------------------------------------------------
// #/rates

export function renderRates(root, scope) {
  const tbody = h('tbody');
  const table = h('table', {class: 'grid', testid: 'rates-table'},
    h('thead', {}, h('tr', {}, ['Rate', 'Limit', 'Per', 'Window use', 'Waiting', 'Paused']
      .map((t) => h('th', {}, t)))),
    tbody);
  const empty = h('p', {class: 'empty', testid: 'rates-empty', hidden: true},
    'No rate is declared. Add one in duro.config.py: ',
    h('code', {}, 'define_workspace(rates={"partner-calls": Rate(limit=100, per="1m")})'));
  const error = h('div', {class: 'error-box', testid: 'rates-error', hidden: true});
  root.append(h('div', {class: 'page-head'}, h('h1', {}, 'Rates'),
    h('span', {class: 'muted small'}, 'Grants per window; overrides and pauses hold until reset or resumed.')),
  error, table, empty);

  const refresh = scope.refresher(async () => {
    try {
      const {data} = await api('GET', '/api/rates');
      if (!scope.alive) return;
      showError(error, null);
      tbody.replaceChildren(...data.rates.map(rateRow));
      table.hidden = !data.rates.length;
      empty.hidden = !!data.rates.length;
    } catch (err) {
      if (scope.alive) showError(error, err);
    }
  });
  scope.on('reload', refresh);
  scope.on('live', refresh);
  scope.every(SAMPLE_MS, refresh);
  refresh();
}

function rateRow(rate) {
  return h('tr', {testid: `rate-row-${rate.name}`, 'data-rate': rate.name},
    h('td', {}, h('a', {href: `#/rates/${enc(rate.name)}`, testid: 'rate-link'}, rate.name)),
    h('td', {testid: 'rate-limit'}, limitText(rate)),
    h('td', {}, rate.per, rate.per_key ? [' ', badge('per key', 'override')] : null),
    h('td', {}, meter(rate)),
    h('td', {class: 'num', testid: 'rate-waiting'}, rate.waiting),
    h('td', {testid: 'rate-paused'}, pausedText(rate)));
}

function limitText(rate) {
  return [h('span', {class: 'num'}, rate.effective_limit), rate.limit_override != null
    ? [' ', badge(`override · config ${rate.limit}`, 'override',
      {testid: 'limit-override-badge', title: `duro.config.py says ${rate.limit}`})]
    : null];
}

function pausedText(rate) {
  if (!rate.paused_until) return h('span', {class: 'muted'}, '–');
  return [badge('paused', 'failed', {testid: 'paused-badge'}), ' until ',
    timeEl(rate.paused_until)];
}

function meter(rate) {
  const limit = Math.max(1, rate.effective_limit);
  const pct = `${Math.min(100, (100 * rate.granted) / limit)}%`;
  return h('div', {class: 'meter-cell', testid: 'rate-use',
    title: `${rate.granted} granted in the current window of ${rate.per}, of ${rate.effective_limit}`},
  h('div', {class: 'meter'}, h('span', {class: 'meter-busy', style: `width: ${pct}`})),
  h('span', {class: 'small muted num'}, `${rate.granted} / ${rate.effective_limit}`));
}

// ---------------------------------------------------------------------------------------------
// #/rates/{name}

export function renderRate(root, scope, [name]) {
  const base = `/api/rates/${enc(name)}`;
  const stats = h('div', {class: 'stats'});
  const chartBox = h('div', {class: 'chart-box', testid: 'rate-chart'});
  const waitersBox = h('div');
  const error = h('div', {class: 'error-box', testid: 'rate-error', hidden: true});
  const points = []; // sampled by this page while it is open: {at, busy: granted, waiting}
  let rate = null;

  const limitInput = h('input', {type: 'number', testid: 'rate-limit-input', placeholder: 'e.g. 100',
    'aria-label': 'Limit'});
  const limitError = h('div', {class: 'error-box', testid: 'rate-limit-error', hidden: true, role: 'alert'});
  const limitReset = h('button', {type: 'button', testid: 'rate-limit-reset', onclick: () => setLimit(null)},
    'Reset');
  const limitForm = h('form', {class: 'setting', testid: 'rate-limit-form', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    const text = limitInput.value.trim();
    setLimit(/^-?\d+$/.test(text) ? Number(text) : text);
  }},
  h('label', {}, h('span', {class: 'setting-label'}, 'Limit per window'), limitInput),
  h('button', {type: 'submit', class: 'primary', testid: 'rate-limit-save'}, 'Save'), limitReset, limitError,
  h('div', {class: 'small muted'}, 'Raising it grants the waiters the window now allows at once.'));

  const pauseInput = h('input', {type: 'text', testid: 'pause-input', placeholder: 'e.g. 5m',
    'aria-label': 'Pause for'});
  const pauseError = h('div', {class: 'error-box', testid: 'pause-error', hidden: true, role: 'alert'});
  const resume = h('button', {type: 'button', testid: 'resume', onclick: () => act('resume', {})}, 'Resume');
  const pauseForm = h('form', {class: 'setting', testid: 'pause-form', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    act('pause', {duration: pauseInput.value.trim()});
  }},
  h('label', {}, h('span', {class: 'setting-label'}, 'Pause for'), pauseInput),
  h('button', {type: 'submit', class: 'danger', testid: 'pause'}, 'Pause'), resume, pauseError,
  h('div', {class: 'small muted'}, 'No grant is made in any process until the pause ends; waiters keep their places.'));

  const page = h('div', {testid: 'rate-detail', hidden: true},
    h('div', {class: 'page-head'}, h('h1', {}, 'Rate ', h('span', {class: 'mono'}, name)),
      h('a', {href: '#/rates', class: 'small'}, '← all rates')),
    stats,
    h('section', {}, h('div', {class: 'section-head'}, h('h2', {}, 'Granted and waiting'),
      h('div', {class: 'legend'}, h('span', {class: 'key line-busy'}, 'granted in the window'),
        h('span', {class: 'key line-waiting'}, 'waiting'), h('span', {class: 'key line-capacity'}, 'limit'))),
    chartBox, h('div', {class: 'small muted'}, 'Sampled by this page every 2 s while it is open.')),
    h('section', {}, h('h2', {}, 'Waiters ', h('span', {class: 'muted small'}, 'by key, in order: 1 is next')),
      waitersBox),
    h('section', {}, h('h2', {}, 'Settings'), h('div', {class: 'settings'}, limitForm, pauseForm)));
  root.append(error, page);

  const show = (data, fromUser = false) => {
    rate = data;
    page.hidden = false;
    stats.replaceChildren(
      stat('Limit', limitText(rate), 'stat-limit'),
      stat('Per', rate.per + (rate.per_key ? ' (per key)' : ''), 'stat-per'),
      stat('Granted in the window', `${rate.granted} / ${rate.effective_limit}`, 'stat-granted'),
      stat('Waiting', String(rate.waiting), 'stat-waiting'),
      stat('Paused', pausedText(rate), 'stat-paused'));
    if (fromUser || document.activeElement !== limitInput) limitInput.value = String(rate.effective_limit);
    limitReset.disabled = rate.limit_override == null;
    resume.disabled = !rate.paused_until;
  };

  const setLimit = async (value) => {
    showError(limitError, null);
    try {
      const {data} = await api('PUT', `${base}/limit`, {limit: value});
      show(data.rate, true);
      toast(value === null ? 'Limit reset to duro.config.py' : `Limit of ${name} is now ${data.rate.effective_limit}`);
    } catch (err) {
      showError(limitError, err);
    }
  };

  const act = async (verb, body) => {
    showError(pauseError, null);
    try {
      const {data} = await api('POST', `${base}/${verb}`, body);
      show(data.rate, true);
      toast(verb === 'pause' ? `${name} paused` : `${name} resumed`);
      refreshWaiters();
    } catch (err) {
      showError(pauseError, err);
    }
  };

  const refreshWaiters = async () => {
    const {data} = await api('GET', `${base}/waiters`);
    if (!scope.alive) return;
    waitersBox.replaceChildren(data.waiters.length ? waitersTable(data.waiters)
      : h('p', {class: 'empty', testid: 'waiters-empty'}, 'Nobody waits: every request was granted.'));
  };

  const refresh = scope.refresher(async () => {
    try {
      const {data} = await api('GET', base);
      if (!scope.alive) return;
      showError(error, null);
      show(data.rate);
      points.push({at: new Date().toISOString(), busy: data.rate.granted, waiting: data.rate.waiting});
      if (points.length > 450) points.shift(); // 15 minutes
      chartBox.replaceChildren(chart(points, data.rate.effective_limit, chartBox.clientWidth || 760));
      await refreshWaiters();
    } catch (err) {
      if (!scope.alive) return;
      if (err.status === 404) {
        root.replaceChildren(h('p', {class: 'empty', testid: 'rate-not-found'},
          `There is no rate ${name}. `, h('a', {href: '#/rates'}, 'All rates')));
        return;
      }
      showError(error, err);
    }
  });
  scope.on('reload', refresh);
  scope.on('live', refresh);
  scope.every(SAMPLE_MS, refresh);
  refresh();
}

function stat(label, value, testid) {
  return h('div', {class: 'stat', testid}, h('div', {class: 'stat-label'}, label),
    h('div', {class: 'stat-value'}, value));
}

function waitersTable(waiters) {
  return h('table', {class: 'grid', testid: 'waiters-table'},
    h('thead', {}, h('tr', {}, ['#', 'Run', 'Key', 'Cost', 'Since', 'Times out'].map((t) => h('th', {}, t)))),
    h('tbody', {}, waiters.map((w) => h('tr', {testid: 'waiter-row', 'data-position': w.position},
      h('td', {class: 'num'}, w.position),
      h('td', {}, w.run_id ? h('a', {href: `#/runs/${enc(w.run_id)}`, class: 'mono', testid: 'waiter-run-link'},
        w.run_id) : '–'),
      h('td', {class: 'mono'}, w.key ?? '–'),
      h('td', {class: 'num'}, w.cost),
      h('td', {}, timeEl(w.enqueued_at)),
      h('td', {}, w.timeout_at ? timeEl(w.timeout_at) : '–')))));
}
