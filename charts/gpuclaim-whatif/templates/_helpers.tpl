{{- define "whatif.name" -}}
{{- printf "%s-whatif" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "whatif.labels" -}}
app.kubernetes.io/name: gpuclaim-whatif
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "whatif.claim" -}}
{{- .Values.results.existingClaim | default (printf "%s-results" (include "whatif.name" .)) -}}
{{- end -}}

{{- define "whatif.configMap" -}}
{{- .Values.study.existingConfigMap | default (printf "%s-study" (include "whatif.name" .)) -}}
{{- end -}}

{{/* The study's arguments every pod gives: the study, the output, the seeds. */}}
{{- define "whatif.studyArgs" -}}
- /study/{{ required "study.file names the study file" .Values.study.file }}
- --out
- /results
{{- with .Values.study.seeds }}
- --seeds
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The pod settings both Jobs share: no API access, a non-root read-only container, the volumes. */}}
{{- define "whatif.podSpec" -}}
restartPolicy: Never
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
- name: study
  configMap:
    name: {{ include "whatif.configMap" . }}
- name: results
  persistentVolumeClaim:
    claimName: {{ include "whatif.claim" . }}
{{- end -}}

{{- define "whatif.container" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
volumeMounts:
- name: study
  mountPath: /study
  readOnly: true
- name: results
  mountPath: /results
{{- end -}}
