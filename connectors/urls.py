from django.urls import path

from connectors import views

urlpatterns = [
    path("", views.connector_list, name="connector-list"),
    path("connectors/<path:name>/", views.connector_detail, name="connector-detail"),
]
