// The dashboard's client of the HTTP API: JSON with errors as exceptions,
// and the URL of a panel's range query.

import { stepFor } from './state';
import { PanelSpec, selector } from './transform';

export async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error ?? `${r.status}`);
  return body as T;
}

/// A panel's history: `step` seconds a bucket, by default the range's.
export function queryUrl(spec: PanelSpec, sel: string, from: number, to: number, step = stepFor(from, to)): string {
  const p = new URLSearchParams({ query: sel, from: from.toFixed(3), to: to.toFixed(3), step: `${Math.round(step * 1e6)}us` });
  if (spec.rate) p.set('rate', 'true');
  if (spec.by) { p.set('by', spec.by.join(',')); p.set('group', spec.group ?? 'sum'); }
  return `/api/v1/query?${p}`;
}

export function selectorFor(spec: PanelSpec, host: string | null): string {
  return selector(spec, host ? { host } : {});
}
