from django.urls import path

from analysis.settings import views

urlpatterns = [
    path("settings/", views.settings_home, name="settings"),
    path("settings/prices", views.prices, name="settings-prices"),
    path("settings/prices/new", views.price_new, name="settings-price-new"),
    path("settings/prices/<int:price_id>/edit", views.price_edit, name="settings-price-edit"),
    path("projects/<id:project>/settings/", views.keys, name="settings-keys"),
    path("projects/<id:project>/settings/keys/new", views.key_new, name="settings-key-new"),
    path("projects/<id:project>/settings/keys/<str:prefix>/revoke", views.key_revoke_view, name="settings-key-revoke"),
    path("projects/<id:project>/settings/members", views.members, name="settings-members"),
    path("projects/<id:project>/settings/members/add", views.member_add_view, name="settings-member-add"),
    path("projects/<id:project>/settings/members/<int:user_id>/role", views.member_role_view, name="settings-member-role"),
    path("projects/<id:project>/settings/members/<int:user_id>/remove", views.member_remove_view,
         name="settings-member-remove"),
    path("projects/<id:project>/settings/retention", views.retention, name="settings-retention"),
    path("projects/<id:project>/settings/audit", views.audit, name="settings-audit"),
]
