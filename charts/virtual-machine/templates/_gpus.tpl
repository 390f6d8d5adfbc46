{{/*
The GPU render, the engine's `render_vm` rule (engine/src/rules/render.rs; the shared table
charts/virtual-machine/tests/cases.yaml holds both to the same answers). Returns JSON: `raw` (the
spec.domain.devices.gpus entries) and `annotation` (the claims annotation, "" when there are no references).
Checks, in this order: each entry in list order (exactly one of name, claim and claimTemplate; nothing empty; a
count from 1 to 4294967295), then raw names beside references, then references while the platform switch is off.
A refusal fails the render with "<Reason>: <message>", the engine's reason word and message.
*/}}
{{- define "virtual-machine.gpus" -}}
{{- $cluster := index .Values "_cluster" | default dict -}}
{{- $enabled := eq (index $cluster "gpu-claims-enabled" | default "" | toString) "true" -}}
{{- $raw := list -}}
{{- $references := list -}}
{{- $firstRaw := -1 -}}
{{- $firstReference := -1 -}}
{{- range $index, $entry := .Values.gpus | default list -}}
{{- $given := list -}}
{{- range $kind := list "name" "claim" "claimTemplate" -}}
{{- if hasKey $entry $kind -}}{{- $given = append $given $kind -}}{{- end -}}
{{- end -}}
{{- if eq (len $given) 0 -}}
{{- fail (printf "NotOneKind: gpus[%d] gives none of name, claim and claimTemplate; give exactly one" $index) -}}
{{- else if gt (len $given) 1 -}}
{{- fail (printf "NotOneKind: gpus[%d] gives %s; give exactly one of name, claim and claimTemplate" $index (join " and " $given)) -}}
{{- end -}}
{{- $kind := first $given -}}
{{- if eq $kind "claimTemplate" -}}
{{- $template := $entry.claimTemplate -}}
{{- $class := index $template "class" | default "" -}}
{{- if eq $class "" -}}
{{- fail (printf "EmptyField: gpus[%d].claimTemplate.class is empty" $index) -}}
{{- end -}}
{{- $count := index $template "count" -}}
{{- $whole := false -}}
{{- if or (kindIs "float64" $count) (kindIs "int64" $count) (kindIs "int" $count) -}}
{{- $units := float64 $count -}}
{{- $whole = and (ge $units 1.0) (le $units 4294967295.0) (eq $units (floor $units)) -}}
{{- end -}}
{{- if not $whole -}}
{{- fail (printf "CountNotPositive: gpus[%d].claimTemplate.count must be a whole number from 1 to 4294967295" $index) -}}
{{- end -}}
{{- $references = append $references (dict "claimTemplate" (dict "class" $class "count" (int64 $count))) -}}
{{- if lt $firstReference 0 -}}{{- $firstReference = $index -}}{{- end -}}
{{- else -}}
{{- $value := index $entry $kind -}}
{{- if eq $value "" -}}
{{- fail (printf "EmptyField: gpus[%d].%s is empty" $index $kind) -}}
{{- end -}}
{{- if eq $kind "name" -}}
{{- $raw = append $raw (dict "name" (printf "gpu%d" $index) "deviceName" $value) -}}
{{- if lt $firstRaw 0 -}}{{- $firstRaw = $index -}}{{- end -}}
{{- else -}}
{{- $references = append $references (dict "claim" $value) -}}
{{- if lt $firstReference 0 -}}{{- $firstReference = $index -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (ge $firstRaw 0) (ge $firstReference 0) -}}
{{- fail (printf "MixedList: gpus[%d] is a raw device name and gpus[%d] a claim reference; list raw names or references, not both" $firstRaw $firstReference) -}}
{{- end -}}
{{- if and (ge $firstReference 0) (not $enabled) -}}
{{- fail (printf "ClaimsDisabled: gpus[%d] is a claim reference, but GPU claims are not enabled on this cluster (_cluster.gpu-claims-enabled is not \"true\")" $firstReference) -}}
{{- end -}}
{{- $annotation := "" -}}
{{- if $references -}}{{- $annotation = toJson $references -}}{{- end -}}
{{- dict "raw" $raw "annotation" $annotation | toJson -}}
{{- end -}}
