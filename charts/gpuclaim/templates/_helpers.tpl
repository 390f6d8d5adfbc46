{{/* The names every template shares. */}}
{{- define "gpuclaim.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuclaim.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuclaim.labels" -}}
{{ include "gpuclaim.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuclaim.serviceAccount" -}}
{{ include "gpuclaim.fullname" . }}
{{- end -}}

{{/* The user the controller acts as: the settings name it as controllerUser. */}}
{{- define "gpuclaim.user" -}}
{{ printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpuclaim.serviceAccount" .) }}
{{- end -}}

{{- define "gpuclaim.webhookService" -}}
{{ include "gpuclaim.fullname" . }}-webhook
{{- end -}}

{{- define "gpuclaim.metricsService" -}}
{{ include "gpuclaim.fullname" . }}-metrics
{{- end -}}

{{/* The serving Certificate, as cert-manager's CA injector names it. */}}
{{- define "gpuclaim.servingCertificate" -}}
{{ include "gpuclaim.fullname" . }}-serving
{{- end -}}

{{/* Namespaces no webhook sees: the system ones, and the release's own (the controller must start without itself). */}}
{{- define "gpuclaim.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range .Values.webhook.excludedNamespaces }}
        - {{ . | quote }}
        {{- end }}
        - {{ .Release.Namespace | quote }}
{{- end -}}

{{/* What every webhook of the chart shares (its failure policy is in its admission/webhooks/ file). */}}
{{- define "gpuclaim.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
matchPolicy: Equivalent
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end -}}
