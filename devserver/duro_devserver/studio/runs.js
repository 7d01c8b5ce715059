// The runs list (#/runs) and one run's detail (#/runs/{id}).

import {
  api, badge, confirmDialog, enc, errorBox, errorName, h, json, showError, statusBadge, syncRows, timeEl, toast,
} from './lib.js';

const STATUSES = ['pending', 'running', 'suspended', 'blocked', 'completed', 'failed', 'cancelled'];
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const RETRYABLE = new Set(['failed', 'cancelled']);
const PAGE = 50;

// ---------------------------------------------------------------------------------------------
// #/runs

export function renderRuns(root, scope, _args, query) {
  const filters = {
    workflow: query.get('workflow') || '',
    status: query.get('status') || '',
    tag: query.get('tag') || '',
  };
  const state = {runs: [], next: null};

  const go = (change) => {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries({...filters, ...change})) if (value) params.set(key, value);
    const search = params.toString();
    location.hash = search ? `#/runs?${search}` : '#/runs';
  };

  const workflowSelect = h('select', {testid: 'filter-workflow', 'aria-label': 'Workflow',
    onchange: () => go({workflow: workflowSelect.value})},
  h('option', {value: ''}, 'all workflows'),
  filters.workflow ? h('option', {value: filters.workflow, selected: true}, filters.workflow) : null);
  const statusSelect = h('select', {testid: 'filter-status', 'aria-label': 'Status',
    onchange: () => go({status: statusSelect.value})},
  h('option', {value: ''}, 'any status'),
  STATUSES.map((s) => h('option', {value: s, selected: s === filters.status}, s)));
  const tagInput = h('input', {type: 'search', testid: 'filter-tag', placeholder: 'tag, e.g. concurrency:tenant-a',
    value: filters.tag, 'aria-label': 'Tag', onchange: () => go({tag: tagInput.value.trim()})});
  const anyFilter = filters.workflow || filters.status || filters.tag;
  // Retry or cancel every run the filter matches (not with a tag filter: the bulk actions take a
  // workflow and a status), the count confirmed first.
  const bulkVerb = filters.tag ? null : RETRYABLE.has(filters.status) ? 'retry'
    : filters.status && !TERMINAL.has(filters.status) ? 'cancel' : null;
  const bulk = bulkVerb ? h('button', {type: 'button', testid: `runs-${bulkVerb}`,
    class: bulkVerb === 'cancel' ? 'danger' : null, onclick: () => bulkAction(bulkVerb)},
  bulkVerb === 'retry' ? 'Retry these runs…' : 'Cancel these runs…') : null;

  const tbody = h('tbody');
  const table = h('table', {class: 'grid', testid: 'runs-table'},
    h('thead', {}, h('tr', {}, ['Run', 'Workflow', 'Status', 'Created', 'Updated'].map((t) => h('th', {}, t)))),
    tbody);
  const empty = h('p', {class: 'empty', testid: 'runs-empty', hidden: true},
    anyFilter ? 'No run matches these filters.' : 'No runs yet. Start one from ',
    anyFilter ? null : h('a', {href: '#/workflows'}, 'Workflows'), anyFilter ? null : '.');
  const more = h('button', {testid: 'runs-load-more', hidden: true, onclick: () => loadMore()}, 'Load more');
  const error = h('div', {class: 'error-box', testid: 'runs-error', hidden: true});

  root.append(
    h('div', {class: 'page-head'}, h('h1', {}, 'Runs'),
      h('form', {class: 'filters', testid: 'runs-filters', onsubmit: (e) => e.preventDefault()},
        workflowSelect, statusSelect, tagInput,
        anyFilter ? h('a', {href: '#/runs', testid: 'filter-clear'}, 'clear filters') : null), bulk),
    error, table, empty, h('div', {class: 'more'}, more));

  const path = (limit, cursor) => {
    const params = new URLSearchParams({limit: String(limit)});
    if (filters.workflow) params.set('workflow', filters.workflow);
    if (filters.status) params.set('status', filters.status);
    if (filters.tag) params.set('tag', filters.tag);
    if (cursor) params.set('cursor', cursor);
    return `/api/runs?${params}`;
  };

  const draw = () => {
    syncRows(tbody, state.runs.map(runRow), 'data-run-id'); // the rows shown stay: live updates
    table.hidden = state.runs.length === 0;
    empty.hidden = state.runs.length !== 0;
    more.hidden = !state.next;
  };

  // A refresh reloads as many rows as are shown, so "load more" pages survive live updates; one
  // that crossed a "load more" is dropped and done again.
  let pages = 0;
  let loadingMore = false;
  const refresh = scope.refresher(async () => {
    try {
      const seen = pages;
      const {data} = await api('GET', path(Math.min(500, Math.max(PAGE, state.runs.length))));
      if (!scope.alive) return;
      if (loadingMore || seen !== pages) {
        refresh();
        return;
      }
      const shown = state.runs;
      state.runs = data.runs;
      state.next = data.next_cursor;
      // scrolled past what one refresh reloads: the older rows stay, after the fresh ones
      if (data.next_cursor && shown.length > data.runs.length) {
        const last = data.runs[data.runs.length - 1];
        const tail = shown.filter((run) => olderThan(run, last));
        if (tail.length) {
          state.runs = data.runs.concat(tail);
          state.next = next;
        }
      }
      showError(error, null);
      draw();
    } catch (err) {
      if (scope.alive) showError(error, err);
    }
  });

  let next = null; // the cursor after the last row shown
  const loadMore = async () => {
    if (loadingMore || !state.next) return;
    more.disabled = true;
    loadingMore = true;
    try {
      const {data} = await api('GET', path(PAGE, state.next));
      if (!scope.alive) return;
      const known = new Set(state.runs.map((r) => r.id));
      state.runs.push(...data.runs.filter((r) => !known.has(r.id)));
      state.next = next = data.next_cursor;
      pages += 1;
      draw();
    } catch (err) {
      showError(error, err);
    } finally {
      loadingMore = false;
      more.disabled = false;
    }
    // the list still ends within sight (a tall window): the next page too
    if (scope.alive && state.next && more.getBoundingClientRect().top < innerHeight + 200) loadMore();
  };

  // more rows as the list scrolls to its end (the button stays, for keyboards)
  if ('IntersectionObserver' in window) {
    const watcher = new IntersectionObserver((seen) => {
      if (seen.some((entry) => entry.isIntersecting) && scope.alive) loadMore();
    }, {rootMargin: '200px'});
    watcher.observe(more);
    scope.cleanups.push(() => watcher.disconnect());
  }

  const bulkAction = async (verb) => {
    const body = {workflow: filters.workflow || null, status: filters.status};
    try {
      const {data: would} = await api('POST', `/api/runs/${verb}`, {...body, dry_run: true});
      const count = would.report.run_ids.length;
      if (!count) {
        toast(`No run to ${verb}`);
        return;
      }
      const ok = await confirmDialog({
        title: `${verb === 'retry' ? 'Retry' : 'Cancel'} ${count} run${count === 1 ? '' : 's'}?`,
        message: verb === 'retry'
          ? 'Each run goes on from the call that failed, on the code deployed now; the calls before it are '
            + 'read back from its history, never executed again.'
          : 'Each run stops where it is and ends as cancelled; unfinished children are cancelled too.',
        details: [['workflow', filters.workflow || 'all workflows'], ['status', filters.status], ['runs', String(count)]],
        confirmLabel: `${verb === 'retry' ? 'Retry' : 'Cancel'} ${count} run${count === 1 ? '' : 's'}`,
        confirmTestid: `confirm-${verb}-runs`,
      });
      if (!ok) return;
      const {data} = await api('POST', `/api/runs/${verb}`, {...body, dry_run: false});
      const done = data.report.run_ids.length;
      const refused = Object.keys(data.report.refused).length;
      toast(`${verb === 'retry' ? 'Retried' : 'Cancelled'} ${done} run${done === 1 ? '' : 's'}`
        + (refused ? ` (${refused} refused)` : ''));
    } catch (err) {
      showError(error, err);
    }
    refresh();
  };

  scope.on('run', (event) => {
    if (!filters.workflow || event.workflow === filters.workflow) refresh();
  });
  scope.on('limits', refresh); // a run joins or leaves a limit's queue
  scope.on('live', refresh);
  refresh();

  api('GET', '/api/workflows').then(({data}) => {
    for (const wf of data.workflows) {
      if (wf.name !== filters.workflow) workflowSelect.append(h('option', {value: wf.name}, wf.name));
    }
  }, () => {});
}

/** Whether ``run`` comes after ``other`` in the list (newest first: created earlier, or at the
 *  same instant with a smaller id), as the API's cursor orders them. */
function olderThan(run, other) {
  const a = Date.parse(run.created_at);
  const b = Date.parse(other.created_at);
  return a < b || (a === b && run.id < other.id);
}

/** "waiting for a slot · <limit>", linking to the limit: the run waits in that limit's queue (the
 *  API's queued_for: its request waiting, or reserved for it and not yet confirmed). */
function waitingHint(limit) {
  return h('a', {href: `#/limits/${enc(limit)}`, class: 'waiting-hint small', testid: 'run-waiting-hint',
    'data-limit': limit, title: `waiting in the queue of the limit ${limit}`}, `waiting for a slot · ${limit}`);
}

function runRow(run) {
  const href = `#/runs/${enc(run.id)}`;
  const queued = run.queued_for && !TERMINAL.has(run.status);
  return h('tr', {testid: 'run-row', 'data-run-id': run.id, 'data-status': run.status,
    'data-queued-for': queued ? run.queued_for : null},
    h('td', {}, h('a', {href, testid: 'run-link', class: 'mono'}, run.id)),
    h('td', {}, run.workflow),
    h('td', {}, statusBadge(run.status), queued ? [' ', waitingHint(run.queued_for)] : null),
    h('td', {}, timeEl(run.created_at)),
    h('td', {}, timeEl(run.updated_at)));
}

// ---------------------------------------------------------------------------------------------
// #/runs/{id}

export function renderRun(root, scope, [id]) {
  const content = h('div');
  const cancel = h('button', {class: 'danger', testid: 'run-cancel', disabled: true, onclick: () => cancelRun()},
    'Cancel run');
  const signalName = h('input', {testid: 'signal-name', placeholder: 'signal name', required: true,
    'aria-label': 'Signal name'});
  const signalPayload = h('textarea', {testid: 'signal-payload', rows: 1, placeholder: 'JSON payload (empty = null)',
    'aria-label': 'Signal payload'});
  const signalError = h('div', {class: 'error-box', testid: 'signal-error', hidden: true});
  const signalForm = h('form', {class: 'signal-form', testid: 'signal-form', onsubmit: (e) => sendSignal(e)},
    h('label', {}, 'Send signal'), signalName, signalPayload,
    h('button', {type: 'submit', testid: 'signal-send'}, 'Send'));
  const retry = h('button', {testid: 'run-retry', hidden: true, onclick: () => retryRun()}, 'Retry run');
  const actions = h('div', {class: 'actions'}, retry, cancel, signalForm);
  const head = h('div');
  root.append(h('div', {testid: 'run-detail'}, head, actions, signalError, content));
  actions.hidden = true;
  let run = null;
  // A run's steps come a page at a time: the first page with the run, more on "Load more steps".
  // A refresh reads the first pages again (as many steps as shown, up to 1,000) and keeps the rest.
  let steps = [];
  let next = null;

  const render = () => {
    const fork = TERMINAL.has(run.status) ? forkRun : null;
    const [top, ...body] = runView(run, steps, next === null ? null : loadMore, fork);
    // a refresh keeps unfolded what the user unfolded
    const opened = [...content.querySelectorAll('details')].map((d) => d.open);
    head.replaceChildren(top);
    content.replaceChildren(...body);
    content.querySelectorAll('details').forEach((d, i) => {
      d.open = d.open || Boolean(opened[i]);
    });
  };

  const loadMore = async () => {
    try {
      const {data} = await api('GET', `/api/runs/${enc(id)}/steps?cursor=${enc(next)}&limit=200`);
      if (!scope.alive) return;
      steps = steps.concat(data.steps.filter((step) => step.seq > steps[steps.length - 1].seq));
      next = data.next_cursor;
      render();
    } catch (err) {
      toast(err.message, 'error');
    }
  };

  const refresh = scope.refresher(async () => {
    try {
      const shown = Math.min(1000, Math.max(200, steps.length));
      const {data} = await api('GET', `/api/runs/${enc(id)}?steps_limit=${shown}`);
      if (!scope.alive) return;
      run = data.run;
      const first = data.steps;
      const last = first.length ? first[first.length - 1].seq : -1;
      const tail = data.next_steps_cursor === null ? [] : steps.filter((step) => step.seq > last);
      steps = first.concat(tail);
      if (data.next_steps_cursor === null) next = null;
      else next = tail.length ? String(tail[tail.length - 1].seq) : data.next_steps_cursor;
      render();
      cancel.disabled = TERMINAL.has(run.status);
      retry.hidden = !RETRYABLE.has(run.status);
      signalForm.hidden = TERMINAL.has(run.status);
      actions.hidden = false;
    } catch (err) {
      if (!scope.alive) return;
      if (err.status === 404) {
        head.replaceChildren();
        content.replaceChildren(h('h1', {}, 'Run not found'),
          h('p', {class: 'empty', testid: 'run-not-found'}, `No run has the id “${id}”. `,
            h('a', {href: '#/runs'}, 'Back to runs')));
        actions.hidden = true;
      } else {
        content.replaceChildren(errorBox(err));
      }
    }
  });

  const cancelRun = async () => {
    const ok = await confirmDialog({
      title: 'Cancel this run?',
      message: 'The run stops where it is and ends as cancelled; unfinished children are cancelled too. '
        + 'Slots it holds stay held until released.',
      details: [['run', id], ['workflow', run && run.workflow]],
      confirmLabel: 'Cancel run',
      confirmTestid: 'confirm-cancel-run',
    });
    if (!ok) return;
    try {
      await api('POST', `/api/runs/${enc(id)}/cancel`);
      toast('Run cancelled');
    } catch (err) {
      toast(err.message, 'error');
    }
    refresh();
  };

  const retryRun = async () => {
    const ok = await confirmDialog({
      title: 'Retry this run?',
      message: 'The run goes on from the call that failed, on the code deployed now. The calls before it '
        + 'are read back from its history, never executed again; a slot it no longer holds is taken again first.',
      details: [['run', id], ['workflow', run && run.workflow], ['attempt', String((run && run.attempt || 1) + 1)]],
      confirmLabel: 'Retry run',
      confirmTestid: 'confirm-retry-run',
    });
    if (!ok) return;
    try {
      const {data} = await api('POST', `/api/runs/${enc(id)}/retry`, {});
      toast(`Run retried (attempt ${data.run.attempt})`);
    } catch (err) {
      toast(err.message, 'error');
    }
    refresh();
  };

  const forkRun = async (seq) => {
    const ok = await confirmDialog({
      title: `Fork from step #${seq}?`,
      message: 'A new run of this workflow and input starts with a copy of the calls before this step '
        + '(up to the first slot or rate grant), and runs from there on the code deployed now. This run stays as it is.',
      details: [['run', id], ['from step', String(seq)]],
      confirmLabel: 'Fork run',
      confirmTestid: 'confirm-fork-run',
    });
    if (!ok) return;
    try {
      const {data} = await api('POST', `/api/runs/${enc(id)}/fork`, {from_seq: seq});
      toast(`Forked as run ${data.run.id}`);
      location.hash = `#/runs/${enc(data.run.id)}`;
    } catch (err) {
      toast(err.message, 'error');
    }
  };

  const sendSignal = async (event) => {
    event.preventDefault();
    showError(signalError, null);
    const name = signalName.value.trim();
    let payload = null;
    if (signalPayload.value.trim()) {
      try {
        payload = JSON.parse(signalPayload.value);
      } catch (err) {
        showError(signalError, new Error(`The payload is not valid JSON: ${err.message}`));
        return;
      }
    }
    try {
      await api('POST', `/api/runs/${enc(id)}/signals/${enc(name)}`, payload);
      toast(`Signal “${name}” sent`);
      signalPayload.value = '';
    } catch (err) {
      showError(signalError, err);
    }
  };

  scope.on('run', (event) => event.run_id === id && refresh());
  scope.on('live', refresh);
  refresh();
}

function runView(run, steps, loadMore, fork) {
  const meta = h('dl', {class: 'meta'},
    h('dt', {}, 'workflow'), h('dd', {testid: 'run-workflow'},
      h('a', {href: `#/runs?workflow=${enc(run.workflow)}`}, run.workflow), h('span', {class: 'muted'}, ` v${run.version}`)),
    h('dt', {}, 'created'), h('dd', {}, timeEl(run.created_at)),
    h('dt', {}, 'updated'), h('dd', {}, timeEl(run.updated_at)),
    run.ended_at ? [h('dt', {}, 'ended'), h('dd', {}, timeEl(run.ended_at))] : null,
    run.parent_id ? [h('dt', {}, 'parent'), h('dd', {}, h('a', {href: `#/runs/${enc(run.parent_id)}`, class: 'mono'},
      run.parent_id))] : null,
    run.attempt > 1 ? [h('dt', {}, 'attempt'), h('dd', {testid: 'run-attempt'}, String(run.attempt))] : null,
    run.forked_from ? [h('dt', {}, 'forked from'), h('dd', {testid: 'run-forked-from'},
      h('a', {href: `#/runs/${enc(run.forked_from[0])}`, class: 'mono'}, run.forked_from[0]),
      h('span', {class: 'muted'}, ` at step #${run.forked_from[1]}`))] : null,
    run.namespace && run.namespace !== 'default' ? [h('dt', {}, 'namespace'), h('dd', {}, run.namespace)] : null,
    run.tags && run.tags.length ? [h('dt', {}, 'tags'), h('dd', {},
      run.tags.map((t) => h('a', {href: `#/runs?tag=${enc(t)}`, class: 'tag'}, t)))] : null);

  let outcome;
  if (run.error) {
    outcome = h('section', {},
      h('h2', {}, 'Error'),
      h('div', {class: 'error-box', testid: 'run-error'}, h('strong', {}, errorName(run.error.type)), ': ',
        run.error.message),
      run.error.detail ? divergence(run.error.detail) : null,
      run.error.traceback ? h('details', {}, h('summary', {}, 'Traceback'),
        h('pre', {testid: 'run-traceback'}, run.error.traceback)) : null);
  } else if (run.status === 'completed') {
    outcome = h('section', {}, h('h2', {}, 'Output'), h('pre', {testid: 'run-output'}, json(run.output)));
  }

  // The limit whose queue the run waits in: the API's queued_for, else an open hook step's.
  const hook = TERMINAL.has(run.status) ? null
    : steps.find((step) => step.kind === 'hook' && step.status === 'waiting');
  const queuedFor = TERMINAL.has(run.status) ? null : run.queued_for || (hook ? hookLimit(hook) : null);
  return [
    h('div', {},
      h('div', {class: 'page-head'},
        h('h1', {}, 'Run ', h('span', {class: 'mono', testid: 'run-id'}, run.id)), statusBadge(run.status),
        queuedFor ? waitingHint(queuedFor) : null),
      meta),
    h('div', {class: 'columns'},
      h('section', {}, h('h2', {}, 'Input'), h('pre', {testid: 'run-input'}, json(run.input))),
      outcome),
    h('section', {}, h('h2', {}, 'Steps'), stepsTable(steps, fork),
      loadMore ? h('button', {type: 'button', testid: 'steps-more', onclick: loadMore},
        `Load more steps (${steps.length} shown)`) : null),
  ];
}

/** A run's steps; a retried run's calls that a later attempt made again stay beside the new ones
 *  (muted, with their attempt), and on an ended run each call in its history has a "Fork" button
 *  (``fork(seq)``). */
function stepsTable(steps, fork) {
  if (!steps.length) return h('p', {class: 'empty'}, 'No durable call recorded yet.');
  const latest = new Map();  // seq -> the last attempt that made the call at it
  for (const step of steps) latest.set(step.seq, Math.max(latest.get(step.seq) || 1, step.attempt || 1));
  const heads = ['#', 'Kind', 'Name', 'Status', 'Started', 'Ended', 'Result', ...(fork ? [''] : [])];
  return h('table', {class: 'grid', testid: 'steps-table'},
    h('thead', {}, h('tr', {}, heads.map((t) => h('th', {}, t)))),
    h('tbody', {}, steps.map((step) => {
      const superseded = (step.attempt || 1) < latest.get(step.seq);
      const row = stepRow(step, superseded);
      if (fork) {
        row.append(h('td', {}, superseded ? null : h('button', {type: 'button', class: 'small',
          testid: 'step-fork', title: 'Start a new run from a copy of the calls before this one',
          onclick: () => fork(step.seq)}, 'Fork from here')));
      }
      return row;
    })));
}

function stepRow(step, superseded = false) {
  const isHook = step.kind === 'hook';
  const waiting = step.status === 'waiting';
  const name = [h('span', {}, step.name)];
  if (isHook) {
    const limit = hookLimit(step);
    name.push(' ', badge(waiting ? 'waiting for a slot' : step.status === 'completed' ? 'got a slot' : 'no slot',
      waiting ? 'hook' : 'muted', {testid: 'hook-badge'}),
    ' ', h('a', {href: `#/limits/${enc(limit)}`, testid: 'hook-limit-link', class: 'small'}, `limit ${limit} →`));
  }
  const childId = step.detail && (step.detail.run_id || step.detail.child_id);
  if (childId) name.push(' ', h('a', {href: `#/runs/${enc(childId)}`, class: 'small mono'}, `run ${childId} →`));
  const statusCell = [h('span', {class: `badge step-${step.status}`, testid: 'step-status'}, step.status)];
  if (waiting && step.wake_at) {
    statusCell.push(h('div', {class: 'small muted'}, isHook ? 'gives up ' : 'wakes ', timeEl(step.wake_at)));
  }
  if (superseded) name.push(' ', badge(`attempt ${step.attempt}`, 'muted', {testid: 'step-attempt'}));
  return h('tr', {testid: 'step-row', 'data-seq': step.seq, 'data-kind': step.kind, 'data-status': step.status,
    'data-attempt': step.attempt || 1,
    class: superseded ? 'earlier-attempt' : isHook && waiting ? 'hook-waiting' : isHook ? 'hook' : null},
  h('td', {class: 'num'}, step.seq),
  h('td', {}, h('span', {class: 'kind'}, step.kind)),
  h('td', {}, name),
  h('td', {}, statusCell),
  h('td', {}, timeEl(step.started_at)),
  h('td', {}, timeEl(step.ended_at)),
  h('td', {class: 'result'}, step.error ? stepError(step.error) : valueCell(step.result, step.status)));
}

function hookLimit(step) {
  return (step.detail && step.detail.limit) || step.name.split(' · ').pop();
}

// A NonDeterminismError: what the history recorded and what the code asks for now, side by side.
function divergence(detail) {
  return h('table', {class: 'grid', testid: 'run-divergence', style: 'margin: 10px 0'},
    h('thead', {}, h('tr', {},
      h('th', {}, 'seq'), h('th', {}, 'recorded'), h('th', {}, 'the code now asks'))),
    h('tbody', {}, h('tr', {},
      h('td', {class: 'mono', testid: 'divergence-seq'}, String(detail.seq)),
      h('td', {class: 'mono', testid: 'divergence-recorded'}, detail.recorded),
      h('td', {class: 'mono', testid: 'divergence-asked'}, detail.asked))));
}

function stepError(error) {
  return h('div', {},
    h('span', {class: 'err'}, `${errorName(error.type)}: ${error.message}`),
    error.traceback ? h('details', {}, h('summary', {}, 'traceback'), h('pre', {}, error.traceback)) : null);
}

function valueCell(value, status) {
  if (status !== 'completed') return h('span', {class: 'muted'}, '—');
  const text = JSON.stringify(value) ?? 'null';
  if (text.length <= 80) return h('code', {}, text);
  return h('details', {}, h('summary', {}, h('code', {}, `${text.slice(0, 60)}…`)), h('pre', {}, json(value)));
}
