{{/*
strait.render: the objects of some manifest files, as kustomize renders them in deploy/.
Arguments (a dict): root (the chart context), files (paths under files/), from (the namespace the
files name), ns (the namespace to install into), role (leader|member, for the controller),
configKey/config (a ConfigMap key to replace when config is not empty) and extraArgs (arguments
appended to the controller's or the agent's).
*/}}
{{- define "strait.render" -}}
{{- $root := .root -}}
{{- range $file := .files }}
{{- $text := $root.Files.Get $file | replace $.from $.ns }}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 }}
{{- $o := fromYaml $doc }}
{{- if $o.kind }}
{{- if and (not $o.metadata.namespace) (not (has $o.kind (list "Namespace" "ClusterRole" "ClusterRoleBinding" "ValidatingWebhookConfiguration" "MutatingWebhookConfiguration"))) }}
{{- $_ := set $o.metadata "namespace" $.ns }}
{{- end }}
{{- if eq $o.kind "Deployment" }}
{{- $c := index $o.spec.template.spec.containers 0 }}
{{- $_ := set $c "image" $root.Values.image.controller }}
{{- $_ := set $c "args" (concat (list $.role (printf "--namespace=%s" $.ns) "--config=/etc/strait/controller_manager_config.yaml") (default list $.extraArgs)) }}
{{- end }}
{{- if eq $o.kind "DaemonSet" }}
{{- $c := index $o.spec.template.spec.containers 0 }}
{{- $_ := set $c "image" $root.Values.image.agent }}
{{- if $.extraArgs }}
{{- $_ := set $c "args" (concat $c.args $.extraArgs) }}
{{- end }}
{{- end }}
{{- if and (eq $o.kind "ConfigMap") $.config (hasKey (default dict $o.data) $.configKey) }}
{{- $_ := set $o.data $.configKey $.config }}
{{- end }}
---
{{ toYaml $o }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
