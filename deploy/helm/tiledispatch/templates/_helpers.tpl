{{/* Names and labels shared by every template. */}}
{{- define "tiledispatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tiledispatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tiledispatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tiledispatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tiledispatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tiledispatch.labels" -}}
helm.sh/chart: {{ include "tiledispatch.chart" . }}
{{ include "tiledispatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tiledispatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tiledispatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* A volume source from values, or an emptyDir when none is given. */}}
{{- define "tiledispatch.volumeSource" -}}
{{- if . }}
{{- toYaml . }}
{{- else }}
emptyDir: {}
{{- end }}
{{- end }}
