{{/*
strait.render: the objects of some manifest files, as kustomize renders them in deploy/.
Arguments (a dict): root (the chart context), files (paths under files/), from (the namespace the
files name), ns (the namespace to install into), role (leader|member, for the controller),
configKey/config (a ConfigMap key to replace when config is not empty) and extraArgs (arguments
appended to the controller's or the agent's). The ports come from .Values.ports, one value each:
the container port and, when it is not the binaries' default, the flag that moves the listener
(flags win over the controller config's webhook.port and health.healthProbeBindAddress).
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
{{- $ports := $root.Values.ports }}
{{- if eq $o.kind "Deployment" }}
{{- $c := index $o.spec.template.spec.containers 0 }}
{{- $_ := set $c "image" $root.Values.image.controller }}
{{- $args := list $.role (printf "--namespace=%s" $.ns) "--config=/etc/strait/controller_manager_config.yaml" }}
{{- range $port := $c.ports }}
{{- if eq $port.name "http" }}
{{- $_ := set $port "containerPort" (int $ports.controllerHealth) }}
{{- if ne (int $ports.controllerHealth) 8080 }}
{{- $args = append $args (printf "--health-addr=:%d" (int $ports.controllerHealth)) }}
{{- end }}
{{- end }}
{{- if eq $port.name "webhook" }}
{{- $_ := set $port "containerPort" (int $ports.webhook) }}
{{- if ne (int $ports.webhook) 9443 }}
{{- $args = append $args (printf "--webhook-addr=:%d" (int $ports.webhook)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $c "args" (concat $args (default list $.extraArgs)) }}
{{- end }}
{{- if eq $o.kind "DaemonSet" }}
{{- $c := index $o.spec.template.spec.containers 0 }}
{{- $_ := set $c "image" $root.Values.image.agent }}
{{- range $init := (default list $o.spec.template.spec.initContainers) }}
{{- $_ := set $init "image" $root.Values.image.agent }}
{{- end }}
{{- $args := $c.args }}
{{- range $port := $c.ports }}
{{- if eq $port.name "http" }}
{{- $_ := set $port "containerPort" (int $ports.agentHealth) }}
{{- if ne (int $ports.agentHealth) 9090 }}
{{- $args = append $args (printf "--health-addr=:%d" (int $ports.agentHealth)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $c "args" (concat $args (default list $.extraArgs)) }}
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
