{{/* The VM's labels. */}}
{{- define "virtual-machine.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Whether resources size the VM (both cpu and memory; the schema asks for both or neither). */}}
{{- define "virtual-machine.sized" -}}
{{- $resources := .Values.resources | default dict -}}
{{- if and (hasKey $resources "cpu") (hasKey $resources "memory") -}}true{{- end -}}
{{- end -}}
