// A small inline SVG chart of a limit's busy and waiting counts over time (step lines: a count
// holds its value until the next sample), with the capacity as a dashed line.

import {h, svg} from './lib.js';

const H = 180;
const MIN_SPAN_MS = 10_000;
const PAD = {left: 34, right: 12, top: 12, bottom: 24};

export const SERIES = [
  {key: 'busy', label: 'busy', testid: 'chart-busy-line', className: 'line-busy'},
  {key: 'waiting', label: 'waiting', testid: 'chart-waiting-line', className: 'line-waiting'},
];

export function legend() {
  return h('div', {class: 'legend', testid: 'chart-legend'},
    SERIES.map((s) => h('span', {class: `key ${s.className}`}, s.label)),
    h('span', {class: 'key line-capacity'}, 'capacity'));
}

/** points: [{at, busy, waiting}] oldest first; capacity: a number; width: the box's width in
 *  pixels (drawn at that size, so the labels keep their size); now: ms since the epoch. */
export function chart(points, capacity, width = 760, now = Date.now()) {
  const W = Math.max(320, width);
  const samples = points.map((p) => ({t: new Date(p.at).getTime(), busy: p.busy, waiting: p.waiting}));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', testid: 'limit-chart-svg',
    'aria-label': 'busy and waiting over time'});

  if (!samples.length) {
    root.append(svg('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'axis'}, 'no samples yet'));
    return root;
  }
  // At least 10 s wide, ending now, so a young server's axis still reads well.
  const t1 = Math.max(now, samples[samples.length - 1].t);
  const t0 = Math.min(samples[0].t, t1 - MIN_SPAN_MS);
  const last = samples[samples.length - 1];
  root.dataset.busy = last.busy; // the latest sample, for tests and scripts
  root.dataset.waiting = last.waiting;
  const ticks = yTicks(Math.max(1, capacity || 0, ...samples.map((s) => Math.max(s.busy, s.waiting))));
  const top = ticks[ticks.length - 1];
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * plotW;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  // y axis: whole numbers at an even step from 0 to at least the highest value, with grid lines
  for (const v of ticks) {
    root.append(
      svg('line', {x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid-line'}),
      svg('text', {x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis', testid: 'chart-y-tick'},
        String(v)));
  }
  // time axis: five labels in local time
  let previous = null;
  for (let i = 0; i <= 4; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 4;
    const label = new Date(t).toLocaleTimeString();
    if (label === previous) continue;
    previous = label;
    const anchor = i === 0 ? 'start' : i === 4 ? 'end' : 'middle';
    root.append(svg('text', {x: x(t), y: H - 6, 'text-anchor': anchor, class: 'axis'}, label));
  }
  if (capacity) {
    root.append(svg('line', {x1: PAD.left, x2: W - PAD.right, y1: y(capacity), y2: y(capacity),
      class: 'line-capacity'}));
  }
  for (const series of SERIES) {
    let d = `M ${x(samples[0].t)} ${y(samples[0][series.key])}`;
    for (const s of samples.slice(1)) d += ` H ${x(s.t)} V ${y(s[series.key])}`;
    d += ` H ${x(t1)}`;
    root.append(svg('path', {d, class: series.className, testid: series.testid, fill: 'none'}));
  }
  return root;
}

/** 0, step, 2 step ... up to the first multiple of step at or above `max`: at most six intervals, the
 *  step a whole 1, 2 or 5 times a power of ten (counts are whole, so are the ticks). */
export function yTicks(max, intervals = 6) {
  let step = 1;
  for (let power = 1; step * intervals < max; power *= 10) {
    step = [1, 2, 5, 10].map((m) => m * power).find((s) => s * intervals >= max) ?? 10 * power;
  }
  const ticks = [];
  for (let v = 0; v < max + step; v += step) {
    ticks.push(v);
    if (v >= max) break;
  }
  return ticks;
}
