/**
 * The op table's expression language (device-hip/ops/table.ts), translated to TypeScript and to C++. Both
 * translations keep the source's operators and parentheses, so an expression means the same in both (integer
 * values are long long in C++; every integer here is far below 2^53, so TypeScript's numbers are exact).
 * An identifier the op does not declare is an error at generation time, not a silent `undefined`.
 */

export interface Scope {
  /** scalar argument names → kind */
  scalars: Map<string, 'int' | 'f32' | 'bool'>;
  /** array argument names → their position in the call */
  arrays: Map<string, number>;
  /** output names (only in call templates) */
  outputs?: Set<string>;
  /** loop indices of `each` checks */
  indices?: Set<string>;
  consts: Record<string, number>;
  /** backend-init: an array's or output's device pointer (null when the host pointer is) */
  devicePointer?: (name: string) => string;
}

const TOKEN = /\s+|[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e[+-]?\d+)?f?|==|!=|<=|>=|&&|\|\||[-+*/%()?:<>!,[\]]/gy;
const FUNCS = new Set(['cdiv', 'div', 'finite32']);
const LITERALS = new Set(['nullptr', 'true', 'false']);

export function tokens(src: string): string[] {
  const out: string[] = [];
  TOKEN.lastIndex = 0;
  let at = 0;
  while (at < src.length) {
    TOKEN.lastIndex = at;
    const m = TOKEN.exec(src);
    if (m === null) throw new Error(`op table: cannot read '${src.slice(at)}' in '${src}'`);
    if (m[0].trim() !== '') out.push(m[0]);
    at = TOKEN.lastIndex;
  }
  return out;
}

export type Lang = 'ts' | 'cpp';

/**
 * Where the C++ side finds a name: `reader` (inside an argument reader: scalars are locals v_x, isnull() looks
 * at the call's argument), `after` (the struct `a` is complete; outputs `o`), and in a generated Backend method
 * (host pointers and scalars as parameters): `backend-dims` (sizes: scalars as long long locals v_x) and
 * `backend-init` (kernel argument fields: scalars as the parameters, arrays and outputs as device pointers).
 */
export type CppPlace = 'reader' | 'after' | 'backend-dims' | 'backend-init';

export function translate(src: string, scope: Scope, lang: Lang, place: CppPlace = 'reader'): string {
  const t = tokens(src);
  const out: string[] = [];
  for (let i = 0; i < t.length; i++) {
    const tok = t[i];
    if (/^[A-Za-z_]/.test(tok)) {
      if ((tok === 'len' || tok === 'isnull') && t[i + 1] === '(' && t[i + 3] === ')') {
        const name = t[i + 2];
        const pos = scope.arrays.get(name);
        const backend = place === 'backend-dims' || place === 'backend-init';
        if (pos === undefined && !(backend && tok === 'len' && scope.outputs?.has(name))) throw new Error(`op table: ${tok}(${name}): ${name} is not an array argument`);
        if (tok === 'len') out.push(lang === 'ts' ? `${name}.length` : backend ? `v_len_${name}` : `(long long)a.${name}.len`);
        else if (lang === 'ts') out.push(`(${name} === null || ${name} === undefined)`);
        else if (place === 'reader') out.push(`op_is_null(info, ${pos})`);
        else if (backend) out.push(`(${name} == nullptr)`);
        else out.push(`(a.${name}.data == nullptr)`);
        i += 3;
      } else if (FUNCS.has(tok)) {
        out.push(lang === 'ts' ? tok : `op_${tok}`);
      } else if (tok in scope.consts) {
        out.push(String(scope.consts[tok]));
      } else if (scope.scalars.has(tok) || scope.indices?.has(tok)) {
        out.push(lang === 'ts' || place === 'backend-init' ? tok : `v_${tok}`);
      } else if (scope.arrays.has(tok) && place === 'backend-init') {
        out.push(scope.devicePointer!(tok));
      } else if (scope.arrays.has(tok)) {
        if (t[i + 1] !== '[') throw new Error(`op table: array ${tok} used as a value in '${src}' (write len(${tok}) or ${tok}[i])`);
        out.push(lang === 'ts' ? tok : `(long long)a.${tok}.data`);
      } else if (scope.outputs?.has(tok) && place === 'backend-init') {
        out.push(scope.devicePointer!(tok));
      } else if (scope.outputs?.has(tok)) {
        out.push(lang === 'ts' ? tok : `o.${tok}.Data()`);
      } else if (LITERALS.has(tok) && lang === 'cpp') {
        out.push(tok);
      } else {
        throw new Error(`op table: unknown name '${tok}' in '${src}'`);
      }
    } else if (lang === 'ts' && (tok === '==' || tok === '!=')) {
      out.push(`${tok}=`);
    } else if (lang === 'ts' && /f$/.test(tok) && /^\d/.test(tok)) {
      out.push(tok.slice(0, -1));
    } else {
      out.push(tok);
    }
  }
  return join(out);
}

// Tokens back to text: spaces between tokens, none inside brackets or before a call's parenthesis.
function join(t: string[]): string {
  return t
    .join(' ')
    .replace(/([([!]) /g, '$1')
    .replace(/ ([)\],])/g, '$1')
    .replace(/(\w) \[/g, '$1[')
    .replace(/(\w) \(/g, (m, w: string, off: number, all: string) => (/(?:^|[^\w])(?:cdiv|div|finite32|op_\w+|op_is_null)$/.test(all.slice(0, off + 1)) ? `${w}(` : m));
}

/** A message with `${expr}` parts → a TypeScript template literal body, or a C++ std::string expression. */
export function message(src: string, scope: Scope, lang: Lang, place: CppPlace = 'reader'): string {
  const parts = src.split(/\$\{([^}]*)\}/);
  if (lang === 'ts') {
    return parts.map((p, i) => (i % 2 === 0 ? p.replace(/[`\\]/g, (c) => `\\${c}`) : `\${${translate(p, scope, 'ts', place)}}`)).join('');
  }
  return parts
    .map((p, i) => (i % 2 === 0 ? (p === '' ? null : JSON.stringify(p)) : `js_num(${translate(p, scope, 'cpp', place)})`))
    .filter((p): p is string => p !== null)
    .join(' + ');
}
