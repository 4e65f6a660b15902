/**
 * The console's pages (issue 38): server-rendered HTML, forms without scripts, one small inline
 * stylesheet that reads at 375 px. Nothing is loaded from elsewhere (the Content-Security-Policy
 * of src/Console/Http.ts allows no script at all), so a key's secret can only be on the page that
 * shows it, never in a bundle or browser storage.
 */

export const escape = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" })[c]!)

const STYLE = `
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;background:#f6f7f9}
header{background:#14213d;color:#fff;padding:.75rem 1rem;display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;justify-content:space-between}
header a{color:#fff}
header form{margin:0}
main{max-width:44rem;margin:0 auto;padding:1rem}
h1{font-size:1.5rem;margin:.5rem 0 1rem}
h2{font-size:1.15rem;margin:1.5rem 0 .5rem}
section{background:#fff;border:1px solid #d0d5dd;border-radius:.5rem;padding:1rem;margin:0 0 1rem}
label{display:block;font-weight:600;margin:.75rem 0 .25rem}
input[type=email],input[type=password],input[type=text]{width:100%;padding:.6rem;font:inherit;border:1px solid #667085;border-radius:.375rem}
button{margin-top:1rem;padding:.6rem 1.1rem;font:inherit;font-weight:600;color:#fff;background:#1d4ed8;border:0;border-radius:.375rem;cursor:pointer}
button.link{background:none;color:#fff;text-decoration:underline;margin:0;padding:0}
a{color:#1d4ed8}
.error{background:#fef3f2;border:1px solid #b42318;color:#7a271a;padding:.75rem;border-radius:.375rem}
.note{background:#eff8ff;border:1px solid #175cd3;padding:.75rem;border-radius:.375rem}
pre,code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.875rem}
pre{background:#101828;color:#f2f4f7;padding:.75rem;border-radius:.375rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.secret{word-break:break-all;font-size:1rem;background:#fffaeb;border:1px solid #b54708;padding:.75rem;border-radius:.375rem;color:#1a1a1a}
ol.steps{padding-left:1.25rem}
ol.steps li{margin:.25rem 0}
.done{color:#05603a;font-weight:600}
.todo{color:#475467}
img.qr{display:block;width:220px;height:220px;max-width:100%;border:1px solid #d0d5dd}
dl{display:grid;grid-template-columns:minmax(0,max-content) minmax(0,1fr);gap:.25rem .75rem}
dt{font-weight:600}
dd{margin:0;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem;font-size:.875rem;background:#fff}
caption{text-align:left;font-weight:600;padding:.25rem 0}
th,td{border:1px solid #d0d5dd;padding:.35rem .5rem;text-align:left;vertical-align:top;word-break:break-word}
form.inline label{font-weight:400;font-size:.75rem;margin:0}
form.inline input{width:8rem;padding:.3rem}
form.inline button{margin:.25rem 0 0;padding:.3rem .6rem}
label.check{display:inline;font-weight:400}
`

export interface Layout {
  readonly title: string
  /** the console's home (`/console`, `/operator/console`) and its name in the header */
  readonly home: string
  readonly brand: string
  /** the signed-in member's address, and the CSRF token of their sign-out form */
  readonly member?: { readonly email: string; readonly csrf: string } | undefined
  readonly message?: string | undefined
}

export const page = (layout: Layout, body: string): string =>
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(layout.title)} · Agent Platform ${escape(layout.brand)}</title>
<style>${STYLE}</style>
</head>
<body>
<header>
<a href="${layout.home}"><strong>Agent Platform</strong> ${escape(layout.brand)}</a>
${
    layout.member === undefined
      ? ""
      : `<form method="post" action="${layout.home}/sign-out"><span>${escape(layout.member.email)}</span> ${
        csrfField(layout.member.csrf)
      }<button class="link" type="submit">Sign out</button></form>`
  }
</header>
<main>
<h1>${escape(layout.title)}</h1>
${layout.message === undefined ? "" : `<p class="error" role="alert">${escape(layout.message)}</p>`}
${body}
</main>
</body>
</html>
`

export const csrfField = (csrf: string) => `<input type="hidden" name="csrf" value="${escape(csrf)}">`

export interface Field {
  readonly name: string
  readonly label: string
  readonly type: "email" | "password" | "text" | "hidden"
  readonly value?: string
  readonly autocomplete?: string
  readonly inputmode?: string
}

export const form = (action: string, csrf: string, fields: ReadonlyArray<Field>, submit: string): string =>
  `<form method="post" action="${escape(action)}">${csrfField(csrf)}${
    fields.map((f) =>
      f.type === "hidden"
        ? `<input type="hidden" name="${f.name}" value="${escape(f.value ?? "")}">`
        : `<label for="${f.name}">${escape(f.label)}</label><input id="${f.name}" name="${f.name}" type="${f.type}" required${
          f.value !== undefined ? ` value="${escape(f.value)}"` : ""
        }${f.autocomplete !== undefined ? ` autocomplete="${f.autocomplete}"` : ""}${
          f.inputmode !== undefined ? ` inputmode="${f.inputmode}"` : ""
        }>`
    ).join("")
  }<button type="submit">${escape(submit)}</button></form>`

export const step = (done: boolean, text: string) =>
  `<li><span class="${done ? "done" : "todo"}">${done ? "Done" : "To do"}:</span> ${text}</li>`
