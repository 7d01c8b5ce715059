/* duro Studio: the dev server's web page. Plain ES modules, no build step; it speaks only the
 * HTTP API of docs/api.md. Screens (hash routes):
 *
 *   #/runs[?workflow=&status=&tag=]  runs, newest first, filtered, live     (runs.js)
 *   #/runs/{id}                      one run: input, output or error, steps (runs.js)
 *   #/workflows                      workflows, each with a start form       (workflows.js)
 *   #/limits                         every limit's numbers, live             (limits.js)
 *   #/limits/{name}                  one limit: chart, slots, queue, edits   (limits.js)
 *   #/rates                          every rate's use of its window, live    (rates.js)
 *   #/rates/{name}                   one rate: chart, waiters, limit, pause  (rates.js)
 *
 * data-testid values (the browser tests use them; scripts of yours may too):
 *
 *   shell       nav-runs, nav-workflows, nav-limits, live-indicator (data-state live|offline),
 *               view, load-error-banner, load-error-message, load-error-traceback,
 *               toast (data-kind ok|error|reloaded), error (a failed call's message box),
 *               confirm-dialog, confirm-dialog-title, confirm-dialog-message, confirm-dismiss,
 *               and the dialog's confirm button, named per action: confirm-release,
 *               confirm-cancel-run
 *   #/runs      runs-filters, filter-workflow, filter-status, filter-tag, filter-clear,
 *               runs-table, run-row (data-run-id, data-status), run-link, run-status,
 *               run-waiting-hint (data-limit: the run waits in that limit's queue),
 *               runs-empty, runs-load-more, runs-error
 *   #/runs/{id} run-detail, run-id, run-status (data-status), run-waiting-hint, run-workflow, run-input,
 *               run-output, run-error, run-traceback, run-cancel, signal-form, signal-name,
 *               signal-payload, signal-send, signal-error, steps-table,
 *               step-row (data-seq, data-kind, data-status), step-status, hook-badge,
 *               hook-limit-link, run-not-found
 *   #/workflows workflows-list, workflows-empty, workflow-<name>, start-form-<name>, and inside
 *               each form: input-<property> (one per generated field), input-value (the one
 *               field of a str, int, float, bool or Literal input), input-json (the whole input
 *               as JSON), run-id-input, start-submit, start-error, start-refused
 *   #/limits    limits-table, limit-row-<name> (data-limit), limit-link, limit-capacity,
 *               limit-busy, limit-reserved, limit-waiting, limit-max-hold,
 *               capacity-override-badge, max-hold-override-badge, limits-empty, limits-error
 *   #/limits/n  limit-detail, limit-error, limit-not-found, stat-capacity, stat-busy,
 *               stat-reserved, stat-waiting, stat-max-hold (each with the override badges above),
 *               limit-chart, limit-chart-svg (data-busy, data-waiting: the latest sample),
 *               chart-busy-line, chart-waiting-line, chart-y-tick, chart-legend, chart-minutes,
 *               slots-table, slot-row (data-slot-id, data-state), slot-run-link,
 *               release-<slot id>, slots-empty, queue-table, queue-row (data-slot-id,
 *               data-position), queue-run-link, queue-empty, capacity-form, capacity-input,
 *               capacity-save, capacity-reset, capacity-error, max-hold-form, max-hold-input,
 *               max-hold-save, max-hold-reset, max-hold-error
 *   #/rates     rates-table, rate-row-<name> (data-rate), rate-link, rate-limit, rate-use,
 *               rate-waiting, rate-paused, paused-badge, limit-override-badge, rates-empty,
 *               rates-error
 *   #/rates/n   rate-detail, rate-error, rate-not-found, stat-limit, stat-per, stat-granted,
 *               stat-waiting, stat-paused, rate-chart (limit-chart-svg inside: data-busy is the
 *               granted count), waiters-table, waiter-row (data-position), waiter-run-link,
 *               waiters-empty, rate-limit-form, rate-limit-input, rate-limit-save,
 *               rate-limit-reset, rate-limit-error, pause-form, pause-input, pause, resume,
 *               pause-error
 */

import {api, connectEvents, events, Scope, tick, toast} from './lib.js';
import {renderLimit, renderLimits} from './limits.js';
import {renderRate, renderRates} from './rates.js';
import {renderRun, renderRuns} from './runs.js';
import {renderWorkflows} from './workflows.js';

const ROUTES = [
  [/^runs$/, renderRuns],
  [/^runs\/(.+)$/, renderRun],
  [/^workflows$/, renderWorkflows],
  [/^limits$/, renderLimits],
  [/^limits\/(.+)$/, renderLimit],
  [/^rates$/, renderRates],
  [/^rates\/(.+)$/, renderRate],
];

let scope = null;

function route() {
  const hash = location.hash.replace(/^#\/?/, '') || 'runs';
  const [path, search = ''] = hash.split('?');
  const query = new URLSearchParams(search);
  if (scope) scope.close();
  scope = new Scope();
  const view = document.getElementById('view');
  view.replaceChildren();
  for (const link of document.querySelectorAll('nav a')) {
    link.classList.toggle('active', path.split('/')[0] === link.dataset.section);
  }
  for (const [pattern, render] of ROUTES) {
    const match = pattern.exec(path);
    if (match) {
      const args = match.slice(1).map(decodeURIComponent);
      render(view, scope, args, query);
      return;
    }
  }
  location.replace('#/runs');
}

// The banner shown while the project fails to import, and the "reloaded" toast.
function showLoadError(error) {
  const banner = document.querySelector('[data-testid=load-error-banner]');
  banner.hidden = !error;
  banner.querySelector('[data-testid=load-error-message]').textContent = error ? error.message : '';
  const traceback = banner.querySelector('[data-testid=load-error-traceback]');
  traceback.textContent = error ? error.traceback || '' : '';
  traceback.hidden = !traceback.textContent;
  traceback.scrollTop = traceback.scrollHeight; // the last lines say what went wrong
}

function watchLink() {
  const indicator = document.querySelector('[data-testid=live-indicator]');
  const set = (state, text) => {
    indicator.dataset.state = state;
    indicator.textContent = text;
  };
  events.addEventListener('live', () => set('live', 'live'));
  events.addEventListener('offline', () => set('offline', 'reconnecting…'));
  events.addEventListener('reload', (event) => {
    const {ok, error} = event.detail;
    showLoadError(ok ? null : error);
    if (ok) toast('Project reloaded', 'reloaded');
    else toast('The project failed to reload', 'error');
  });
}

async function boot() {
  watchLink();
  connectEvents();
  window.addEventListener('hashchange', route);
  setInterval(tick, 5000);
  route();
  try {
    const {data} = await api('GET', '/api/status');
    showLoadError(data.load_error);
  } catch {
    // the screens show the error of their own calls
  }
}

boot();
