// What the dashboard shows: the host view's charts and the cluster view's
// metrics, as data (see PanelSpec). Names follow docs/metrics.md.

import type { PanelSpec } from './transform';

const busy = (idle: number) => Math.min(100, Math.max(0, 100 * (1 - idle)));
const BUSY = '100 × (1 − idle), clamped to 0…100';

export const HOST_PANELS: PanelSpec[] = [
  // sum by (mode) (rate(node_cpu_seconds_total{host="H"}[s]))
  //   / ignoring(mode) group_left sum(rate(node_cpu_seconds_total{host="H"}[s]))
  { id: 'cpu', title: 'CPU by mode (% of all cores)', unit: 'percent', names: ['node_cpu_seconds_total'],
    rate: true, by: ['mode'], group: 'sum', share: true, map: (v) => 100 * v, mapText: '× 100', stacked: true },
  { id: 'load', title: 'Load average', unit: 'count', names: ['node_load1', 'node_load5', 'node_load15'] },
  { id: 'mem', title: 'Memory', unit: 'bytes',
    names: ['node_memory_MemTotal_bytes', 'node_memory_MemAvailable_bytes', 'node_memory_Cached_bytes', 'node_memory_MemFree_bytes'] },
  { id: 'net', title: 'Network per interface', unit: 'bytes/s', rate: true,
    names: ['node_network_receive_bytes_total', 'node_network_transmit_bytes_total'], labels: { device: '!lo' } },
  { id: 'disk', title: 'Disk I/O per device', unit: 'bytes/s', rate: true,
    names: ['node_disk_read_bytes_total', 'node_disk_written_bytes_total'] },
  { id: 'psi', title: 'Pressure stalls (share of time waiting)', unit: 'ratio', rate: true,
    names: ['node_pressure_cpu_waiting_seconds_total', 'node_pressure_memory_waiting_seconds_total',
      'node_pressure_io_waiting_seconds_total'] },
  { id: 'own', title: "kansoku's own CPU (% of one core)", unit: 'percent', rate: true,
    names: ['process_cpu_seconds_total', 'kansoku_collector_cpu_seconds_total'], map: (v) => 100 * v, mapText: '× 100' },
];

/// The per-core heat map of a host: busy % per core.
export const CORE_HEAT: PanelSpec = {
  id: 'cores', title: 'Busy % per core', unit: 'percent', names: ['node_cpu_seconds_total'],
  labels: { mode: 'idle' }, rate: true, map: busy, mapText: BUSY,
};

/// The stacked modes of one core (chosen by clicking the heat map).
export function coreModes(core: string): PanelSpec {
  return { id: 'core', title: `CPU ${core} by mode (%)`, unit: 'percent', names: ['node_cpu_seconds_total'],
    labels: { cpu: core }, rate: true, by: ['mode'], group: 'sum', share: true, map: (v) => 100 * v, mapText: '× 100', stacked: true };
}

/// The cluster view's metric choices: one value per host.
export const CLUSTER_METRICS: Record<string, PanelSpec & { max?: number }> = {
  cpu: { id: 'cpu', title: 'CPU busy %', unit: 'percent', names: ['node_cpu_seconds_total'], labels: { mode: 'idle' },
    rate: true, by: ['host'], group: 'avg', map: busy, mapText: BUSY, max: 100 },
  net: { id: 'net', title: 'Network received', unit: 'bytes/s', names: ['node_network_receive_bytes_total'],
    labels: { device: '!lo' }, rate: true, by: ['host'], group: 'sum' },
  disk: { id: 'disk', title: 'Disk written', unit: 'bytes/s', names: ['node_disk_written_bytes_total'],
    rate: true, by: ['host'], group: 'sum' },
  load: { id: 'load', title: 'Load (1 min)', unit: 'count', names: ['node_load1'], by: ['host'], group: 'avg' },
  // SNMP targets (kansoku up/snmp/server --snmp-targets): a row per target.
  'snmp-traffic': { id: 'snmp-traffic', title: 'SNMP: interface traffic (in + out)', unit: 'bytes/s',
    names: ['ifHCInOctets', 'ifHCOutOctets'], rate: true, by: ['target'], group: 'sum' },
  'snmp-up': { id: 'snmp-up', title: 'SNMP: answered (1 up, 0 silent)', unit: 'ratio', names: ['kansoku_snmp_up'],
    by: ['target'], group: 'avg', max: 1 },
  'snmp-stale': { id: 'snmp-stale', title: 'SNMP: stale values per answer', unit: 'count',
    names: ['kansoku_snmp_stale_values'], by: ['target'], group: 'sum' },
};
