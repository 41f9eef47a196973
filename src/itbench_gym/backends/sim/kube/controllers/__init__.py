"""The twin's workload controllers (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob),
Endpoints, LoadBalancer addresses (Cloud Provider Kind) and
the Gateway status istiod derives from them, HPA and ResourceQuota, built on a shared informer cache and work queues."""
