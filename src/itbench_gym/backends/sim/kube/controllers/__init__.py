"""The twin's workload controllers (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob),
Endpoints, HPA and ResourceQuota, built on a shared informer cache and work queues."""
