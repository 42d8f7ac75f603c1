from django.urls import path, re_path

from connectors import views

# Names are ``<str:name>`` (no "/", which connector names may not contain).
# Pages that are not about one connector live outside ``connectors/`` so no
# connector name can shadow them.
urlpatterns = [
    path("", views.connector_list, name="connector-list"),
    path("create/", views.connector_create, name="connector-create"),
    path("config/validate/", views.config_validate, name="config-validate"),
    path("config/test-connection/", views.connection_test, name="connection-test"),
    path("connectors/<str:name>/", views.connector_detail, name="connector-detail"),
    path("connectors/<str:name>/live/", views.connector_live, name="connector-live"),
    path("connectors/<str:name>/edit/", views.connector_edit, name="connector-edit"),
    re_path(
        r"^connectors/(?P<name>[^/]+)/config\.(?P<fmt>json|properties)$",
        views.config_export,
        name="connector-config-export",
    ),
    path("connectors/<str:name>/commits/", views.commit_history, name="commit-history"),
    path("connectors/<str:name>/commits/<uuid:commit_id>/", views.commit_detail, name="commit-detail"),
    path("connectors/<str:name>/tasks/<int:index>/restart/", views.task_restart, name="task-restart"),
    path("connectors/<str:name>/<str:action>/", views.connector_action, name="connector-action"),
]
