// The workflows (#/workflows), each with a start form generated from its input's JSON Schema.

import {api, badge, enc, errorBox, h, json, showError, toast} from './lib.js';

export function renderWorkflows(root, scope) {
  const list = h('div', {class: 'cards', testid: 'workflows-list'});
  root.append(h('div', {class: 'page-head'}, h('h1', {}, 'Workflows')), list);
  let shown = null;
  let versionBoxes = new Map();  // workflow name -> the box of its versions table

  // Redrawn only when the workflows themselves change (a reload), so typed input survives; the
  // versions' counts of unfinished runs change with every run, and only their tables are redrawn.
  const refresh = scope.refresher(async () => {
    try {
      const {data} = await api('GET', '/api/workflows');
      if (!scope.alive) return;
      const fingerprint = JSON.stringify(data.workflows.map(({versions, ...wf}) => wf));
      if (fingerprint === shown) {
        for (const wf of data.workflows) versionBoxes.get(wf.name)?.replaceChildren(versionsTable(wf));
        return;
      }
      shown = fingerprint;
      versionBoxes = new Map(data.workflows.map((wf) => [wf.name, h('div', {}, versionsTable(wf))]));
      list.replaceChildren(...data.workflows.map((wf) => workflowCard(wf, versionBoxes.get(wf.name))));
      if (!data.workflows.length) {
        list.append(h('p', {class: 'empty', testid: 'workflows-empty'},
          'No workflow found. Put @workflow functions in workflows/ (or list them in duro.config.py).'));
      }
    } catch (err) {
      if (scope.alive) list.replaceChildren(errorBox(err));
    }
  });
  scope.on('reload', refresh);
  scope.on('run', refresh); // a run started or ended: the versions' counts
  scope.on('live', refresh);
  refresh();
}

function workflowCard(wf, versions) {
  const facts = [h('span', {class: 'muted'}, `v${wf.version}`)];
  if (wf.concurrency) facts.push(badge(describeQuota(wf.concurrency), 'muted', {title: json(wf.concurrency)}));
  if (wf.on_event) facts.push(badge(`on event ${wf.on_event}`, 'muted'));
  if (wf.remote) facts.push(badge('remote', 'muted', {title: 'its code runs in another process'}));
  return h('article', {class: 'card', testid: `workflow-${wf.name}`},
    h('header', {}, h('h2', {}, wf.name), ...facts,
      h('a', {href: `#/runs?workflow=${enc(wf.name)}`, class: 'small push'}, 'runs →')),
    versions,
    startForm(wf),
    wf.input_schema && Object.keys(wf.input_schema).length
      ? h('details', {class: 'schema'}, h('summary', {}, 'input schema'), h('pre', {}, json(wf.input_schema)))
      : null);
}

// Each version: whether this server has its code, and its unfinished runs (a version only the
// store knows waits `pending` for a worker that has it).
function versionsTable(wf) {
  return h('table', {class: 'grid', testid: `versions-${wf.name}`, style: 'margin: 4px 0 12px'},
    h('thead', {}, h('tr', {}, h('th', {}, 'version'), h('th', {}, 'code'), h('th', {}, 'unfinished runs'))),
    h('tbody', {}, ...wf.versions.map((v) => h('tr', {testid: `version-${wf.name}-${v.version}`},
      h('td', {class: 'mono'}, `v${v.version}`),
      h('td', {}, v.registered ? 'registered'
        : badge('no code here', 'muted', {title: 'no worker of this server has this version: its runs wait'})),
      h('td', {testid: 'version-unfinished'}, v.unfinished
        ? h('a', {href: `#/runs?workflow=${enc(wf.name)}`}, String(v.unfinished)) : '0')))));
}

function describeQuota(concurrency) {
  const limit = concurrency.limit;
  if (typeof limit === 'number') return `quota: ${limit} per key`;
  return 'quota per key';
}

// ---------------------------------------------------------------------------------------------
// The start form

function startForm(wf) {
  const schema = wf.takes_input === false ? null : wf.input_schema;
  const fields = buildFields(schema);
  const runId = h('input', {testid: 'run-id-input', placeholder: 'run id (optional; reusing one returns that run)',
    'aria-label': 'Run id'});
  const error = h('div', {class: 'error-box', testid: 'start-error', hidden: true, role: 'alert'});
  const refused = h('div', {class: 'refused', testid: 'start-refused', hidden: true, role: 'alert'});
  const submit = h('button', {type: 'submit', class: 'primary', testid: 'start-submit'}, 'Start run');

  const onSubmit = async (event) => {
    event.preventDefault();
    showError(error, null);
    refused.hidden = true;
    let input;
    try {
      input = fields.collect();
    } catch (err) {
      showError(error, err);
      return;
    }
    const body = {input};
    if (runId.value.trim()) body.run_id = runId.value.trim();
    submit.disabled = true;
    try {
      const {status, data} = await api('POST', `/api/workflows/${enc(wf.name)}/runs`, body);
      if (status === 200) toast('A run with that id exists already: here it is');
      location.hash = `#/runs/${enc(data.run.id)}`;
    } catch (err) {
      if (err.status === 429) showRefusal(refused, err.body);
      else showError(error, err);
    } finally {
      submit.disabled = false;
    }
  };

  return h('form', {class: 'start-form', testid: `start-form-${wf.name}`, onsubmit: onSubmit},
    fields.nodes, h('div', {class: 'row'}, runId, submit), refused, error);
}

function showRefusal(box, body) {
  box.replaceChildren(
    h('strong', {}, 'Refused by the concurrency quota. '),
    'Key ', h('code', {}, String(body.key)), ' allows ', h('strong', {}, String(body.limit)),
    ` active run${body.limit === 1 ? '' : 's'} and has `, h('strong', {}, String(body.active)),
    '. Nothing was created; start again when one of them ends.',
    ...(body.message ? [h('div', {class: 'small muted'}, body.message)] : []));
  box.hidden = false;
}

/** Builds the inputs for a schema; returns {nodes, collect} where collect() gives the input value
 *  (or throws an Error naming the field). */
function buildFields(schema) {
  if (schema === null || schema === undefined) {
    return {nodes: [h('p', {class: 'muted small'}, 'This workflow takes no input.')], collect: () => null};
  }
  const root = schema;
  const top = resolve(schema, root);
  if (top.type === 'object' && top.properties && Object.keys(top.properties).length) {
    const required = new Set(top.required || []);
    const built = Object.entries(top.properties).map(([name, prop]) => field(name, prop, required.has(name), root));
    return {
      nodes: [h('div', {class: 'fields'}, built.map((f) => f.node))],
      collect: () => {
        const value = {};
        for (const f of built) {
          const v = f.read();
          if (v !== undefined) value[f.name] = v;
        }
        return value;
      },
    };
  }
  const kind = primitive(top, root);
  if (kind) {
    // A str, int, float, bool or Literal input: one field of its type, whose value is the input.
    const nullable = allowsNull(top, root);
    const only = field('input', top, !nullable, root, {testid: 'input-value', label: 'Input'});
    return {
      nodes: [h('div', {class: 'fields'}, only.node)],
      collect: () => {
        const value = only.read();
        if (value !== undefined) return value;
        if (nullable) return null;
        throw new Error(kind.type === 'enum' ? 'Choose the input.' : `Enter the input: ${article(kind.type)}.`);
      },
    };
  }
  const area = jsonArea('input-json', initialJson(top), 'Input (JSON)');
  return {
    nodes: [h('label', {class: 'field wide'}, h('span', {}, 'Input (JSON)'), area)],
    collect: () => parseJson(area.value, 'the input', null),
  };
}

/** One labelled input for a property (or, with `testid` and `label`, for the whole input). */
function field(name, prop, required, root, {testid = `input-${name}`, label: text = name} = {}) {
  const spec = resolve(prop, root);
  const kind = primitive(spec, root);
  const title = spec.title || '';
  const label = h('span', {}, text, required ? h('abbr', {class: 'req', title: 'required'}, ' *') : null);
  const def = spec.default;
  let control;
  let read;

  if (kind && kind.type === 'enum') {
    control = h('select', {testid, required},
      required && def === undefined ? null : h('option', {value: ''}, '—'),
      kind.values.map((v, i) => h('option', {value: String(i), selected: v === def}, String(v))));
    read = () => (control.value === '' ? undefined : kind.values[Number(control.value)]);
  } else if (kind && kind.type === 'boolean') {
    control = h('input', {type: 'checkbox', testid, checked: def === true});
    read = () => control.checked;
  } else if (kind && (kind.type === 'integer' || kind.type === 'number')) {
    control = h('input', {type: 'number', testid, required, step: kind.type === 'integer' ? '1' : 'any',
      value: typeof def === 'number' ? String(def) : ''});
    read = () => {
      if (control.value === '') return undefined;
      const n = Number(control.value);
      if (Number.isNaN(n)) throw new Error(`${name}: not a number`);
      return n;
    };
  } else if (kind && kind.type === 'string') {
    control = h('input', {type: 'text', testid, required, value: typeof def === 'string' ? def : '',
      placeholder: spec.format || ''});
    read = () => (control.value === '' && !required ? undefined : control.value);
  } else {
    control = jsonArea(testid, def !== undefined ? json(def) : initialJson(spec), name);
    read = () => parseJson(control.value, name, undefined);
  }
  control.id = `f-${Math.random().toString(36).slice(2)}`;
  const hint = spec.description || (kind ? (kind.type === 'enum' ? null : kind.type) : 'JSON');
  return {
    name,
    read,
    node: h('label', {class: kind ? 'field' : 'field wide', for: control.id, title},
      label, control, hint ? h('span', {class: 'hint'}, hint) : null),
  };
}

/** The primitive shape of a property (string, integer, number, boolean, enum), or null. */
function primitive(spec, root) {
  const variants = spec.anyOf || spec.oneOf;
  if (variants) {
    const rest = variants.map((v) => resolve(v, root)).filter((v) => v.type !== 'null');
    return rest.length === 1 ? primitive(rest[0], root) : null;
  }
  if (Array.isArray(spec.enum) && spec.enum.every((v) => v === null || typeof v !== 'object')) {
    return {type: 'enum', values: spec.enum};
  }
  if ('const' in spec) return {type: 'enum', values: [spec.const]};
  let type = spec.type;
  if (Array.isArray(type)) {
    const rest = type.filter((t) => t !== 'null');
    type = rest.length === 1 ? rest[0] : null;
  }
  return ['string', 'integer', 'number', 'boolean'].includes(type) ? {type} : null;
}

/** Whether a schema accepts null (`str | None`, `Optional[int]`). */
function allowsNull(spec, root) {
  const variants = spec.anyOf || spec.oneOf;
  if (variants) return variants.some((v) => resolve(v, root).type === 'null');
  if (Array.isArray(spec.type)) return spec.type.includes('null');
  return Array.isArray(spec.enum) && spec.enum.includes(null);
}

function article(type) {
  return {integer: 'an integer', number: 'a number', string: 'a string', boolean: 'true or false'}[type] || type;
}

function resolve(spec, root) {
  if (!spec || typeof spec !== 'object') return {};
  const {$ref: ref, ...siblings} = spec;
  if (typeof ref === 'string') {
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    const target = match && root[match[1]] && root[match[1]][match[2]];
    // keys next to the $ref (default, description) win over the definition's own
    return target ? {...resolve(target, root), ...siblings} : siblings;
  }
  return spec;
}

function initialJson(spec) {
  if (spec.type === 'array') return '[]';
  if (spec.type === 'object') return '{}';
  return '';
}

function jsonArea(testid, value, label) {
  return h('textarea', {testid, rows: 3, class: 'mono', value, 'aria-label': label, spellcheck: 'false',
    placeholder: 'JSON, e.g. {"key": "value"}'});
}

function parseJson(text, what, empty) {
  if (!text.trim()) return empty;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${what} is not valid JSON: ${err.message}`);
  }
}
